// v[i] += k for i < n (mod 2^32), one invocation per element.
#version 450
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) buffer V { uint v[]; };
layout(push_constant) uniform Params { uint n; uint k; } p;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) {
        v[i] += p.k;
    }
}
