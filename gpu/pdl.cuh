// pdl.cuh: programmatic dependent launch (Hopper, sm_90 and later). Inside a CUDA Graph a kernel may be
// started while the kernel before it is still finishing (gpu/backend_gpu.c turns the graph's edges between
// consecutive kernels of ours into programmatic edges), so the launch and the block scheduling of one
// kernel overlap the tail of the one before. That is only correct if every such kernel waits for its
// predecessor before it touches memory: pdl_entry() must be the first statement of every kernel in gpu/
// (make layers checks it). griddepcontrol.wait returns once the kernels it depends on have completed and
// their writes are visible; outside a graph, or on an ordinary edge, it returns at once. Then the kernel
// lets its own successor be launched: its blocks start as this kernel's leave room, and wait in turn.
#pragma once

__device__ static inline void pdl_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
