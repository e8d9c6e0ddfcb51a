// Row reductions for the one-row-at-a-time steps (softmax, layer_norm): who owns a row, and its
// max or sum. Two builds of each step (shaders/CMakeLists.txt):
//
//   <step>_subgroup (SUBGROUPS defined): each subgroup owns a row; subgroupMax / subgroupAdd reduce
//     it with no shared memory and no barrier. A row is strided by gl_SubgroupSize, so the host
//     runs this build only with a required subgroup size and full subgroups (engine/vulkan/lanes.h):
//     a lane that is not there would leave its columns out.
//   <step> (no subgroup instruction in its SPIR-V): each workgroup owns a row; a tree reduction
//     through shared memory (any device, any workgroup size).
//
// Every invocation that owns the row must call row_reduce in uniform control flow, and every
// one gets the result. Include after common.glsl.
#ifdef SUBGROUPS
#extension GL_KHR_shader_subgroup_arithmetic : require

// The row this invocation works on (may lie past the last row: the caller checks).
uint row_id() { return flat_workgroup_id() * gl_NumSubgroups + gl_SubgroupID; }
// This invocation's first column of the row, and the stride between its columns.
uint row_lane() { return gl_SubgroupInvocationID; }
uint row_width() { return gl_SubgroupSize; }

// The max (use_max) or sum of `value` over the invocations that own this row.
float row_reduce(float value, bool use_max) { return use_max ? subgroupMax(value) : subgroupAdd(value); }

#else
shared float partial[gl_WorkGroupSize.x];

uint row_id() { return flat_workgroup_id(); }
uint row_lane() { return gl_LocalInvocationID.x; }
uint row_width() { return gl_WorkGroupSize.x; }

// Tree reduction of partial[] into partial[0]; `use_max` picks max, else sum.
float row_reduce(float value, bool use_max) {
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
#endif
