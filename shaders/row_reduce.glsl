// Row reductions for the one-row-at-a-time steps (softmax, layer_norm): who owns a row, and its
// max or sum. Two strategies, picked by specialization constant 1:
//
//   SUBGROUP_ROWS: each subgroup owns a row; subgroupMax / subgroupAdd reduce it with no shared
//     memory and no barrier. The host picks this where the device has subgroup arithmetic and
//     the workgroup is whole subgroups.
//   otherwise: each workgroup owns a row; a tree reduction through shared memory (any device,
//     any workgroup size). Tests force it on lavapipe.
//
// Every invocation that owns the row must call row_reduce in uniform control flow, and every
// one gets the result. Include after common.glsl.
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(constant_id = 1) const bool SUBGROUP_ROWS = false;

shared float partial[gl_WorkGroupSize.x];

// The row this invocation works on (may lie past the last row: the caller checks).
uint row_id() {
  return SUBGROUP_ROWS ? flat_workgroup_id() * gl_NumSubgroups + gl_SubgroupID : flat_workgroup_id();
}
// This invocation's first column of the row, and the stride between its columns.
uint row_lane() { return SUBGROUP_ROWS ? gl_SubgroupInvocationID : gl_LocalInvocationID.x; }
uint row_width() { return SUBGROUP_ROWS ? gl_SubgroupSize : gl_WorkGroupSize.x; }

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

// The max (use_max) or sum of `value` over the invocations that own this row.
float row_reduce(float value, bool use_max) {
  if (SUBGROUP_ROWS) return use_max ? subgroupMax(value) : subgroupAdd(value);
  return workgroup_reduce(value, use_max);
}
