// sums[b] = the sum (mod 2^32) of v[256b .. 256b+255], zeros past n, for
// each of the ceil(n/256) blocks b: workgroup g of G sums blocks g, g+G,
// g+2G, ... (KernelSpec.GridStride), so any number of groups writes every
// sum; dispatching again over the sums reduces further.
#version 450
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer In { uint v[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { uint sums[]; };
layout(push_constant) uniform Params { uint n; } p;

shared uint part[256];

void main() {
    uint l = gl_LocalInvocationID.x;
    uint blocks = p.n / 256u + (p.n % 256u != 0u ? 1u : 0u);
    for (uint b = gl_WorkGroupID.x; b < blocks; b += gl_NumWorkGroups.x) {
        uint i = b * 256u + l;
        part[l] = i < p.n ? v[i] : 0u;
        barrier();
        for (uint s = 128u; s > 0u; s >>= 1) {
            if (l < s) {
                part[l] += part[l + s];
            }
            barrier();
        }
        if (l == 0u) {
            sums[b] = part[0];
        }
        barrier(); // every invocation is done with part before the next block refills it
    }
}
