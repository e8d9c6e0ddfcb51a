// A whole workgroup's max or sum, through shared memory: the row reductions of softmax and
// layer_norm (one workgroup per row). Every invocation of the workgroup must call it, in
// uniform control flow, and every one gets the result. Include after common.glsl.

shared float partial[gl_WorkGroupSize.x];

// Tree reduction of partial[] into partial[0]; `use_max` picks max, else sum.
float workgroup_reduce(float value, bool use_max) {
  uint lane = gl_LocalInvocationID.x;
  partial[lane] = value;
  barrier();
  // The workgroup size need not be a power of two: fold the top part onto a power-of-two prefix.
  uint width = 1u;
  while (width * 2u <= gl_WorkGroupSize.x) width *= 2u;
  if (lane >= width) {
    uint dst = lane - width;
    partial[dst] = use_max ? max(partial[dst], partial[lane]) : partial[dst] + partial[lane];
  }
  barrier();
  for (uint stride = width / 2u; stride > 0u; stride /= 2u) {
    if (lane < stride) {
      partial[lane] = use_max ? max(partial[lane], partial[lane + stride])
                              : partial[lane] + partial[lane + stride];
    }
    barrier();
  }
  float result = partial[0];
  barrier();  // everyone has read partial[0] before the next reduction overwrites it
  return result;
}
