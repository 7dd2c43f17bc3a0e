#version 450
// One item per invocation, no grid-stride loop: it never reads
// gl_NumWorkGroups, so LoadKernel refuses KernelSpec.GridStride for it
// (groups_test.go). Compiled as the shipped kernels are:
//   glslc --target-env=vulkan1.2 -O -o once.spv once.comp
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) buffer V { uint v[]; };
layout(push_constant) uniform Params { uint n; uint k; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) { v[i] += p.k; } }
