// v[i] += k for i < n (mod 2^32). Each invocation strides over the grid
// (KernelSpec.GridStride), so any number of groups covers any n.
#version 450
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) buffer V { uint v[]; };
layout(push_constant) uniform Params { uint n; uint k; } p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        v[i] += p.k;
        if (p.n - i <= stride) {
            break; // the next i is past n: stopping here keeps i + stride from wrapping
        }
    }
}
