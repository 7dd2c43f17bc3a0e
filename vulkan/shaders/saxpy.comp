// y[i] = a*x[i] + y[i] for i < n. Each invocation strides over the grid
// (KernelSpec.GridStride), so any number of groups covers any n.
#version 450
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform Params { uint n; float a; } p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        y[i] = p.a * x[i] + y[i];
        if (p.n - i <= stride) {
            break; // the next i is past n: stopping here keeps i + stride from wrapping
        }
    }
}
