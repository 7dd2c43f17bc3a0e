// sums[g] = the sum (mod 2^32) of v[256g .. 256g+255], zeros past n: one
// workgroup per 256 elements; dispatching again over the sums reduces
// further.
#version 450
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer In { uint v[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { uint sums[]; };
layout(push_constant) uniform Params { uint n; } p;

shared uint part[256];

void main() {
    uint i = gl_GlobalInvocationID.x;
    uint l = gl_LocalInvocationID.x;
    part[l] = i < p.n ? v[i] : 0u;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (l < s) {
            part[l] += part[l + s];
        }
        barrier();
    }
    if (l == 0u) {
        sums[gl_WorkGroupID.x] = part[0];
    }
}
