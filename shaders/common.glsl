// Shared by every step shader: the workgroup size as a specialization constant and the
// undoing of grid folding.
//
// A step launches one invocation per output element (or one workgroup per row). When that
// needs more workgroups than maxComputeWorkGroupCount[0] (65535 on many GPUs), the host folds
// the grid into y and z (engine/vulkan/grid.h) and the shader unfolds it here. Folding rounds
// up, so the last workgroups may lie past the end: every shader bounds-checks its index.

layout(local_size_x_id = 0) in;  // workgroup size: specialization constant 0

#define NEG_INF uintBitsToFloat(0xff800000u)  // -inf: a blocked score

// Index of this workgroup in the unfolded 1-D grid.
uint flat_workgroup_id() {
  return gl_WorkGroupID.x + gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
}

// Index of this invocation in the unfolded 1-D grid of invocations.
uint flat_invocation_id() {
  return flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
}
