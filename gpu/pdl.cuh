// pdl.cuh: programmatic dependent launch (Hopper, sm_90 and later). Inside a CUDA Graph a kernel may be
// started while the kernel before it is still finishing (gpu/graph_pdl.c turns the graph's edges between
// consecutive kernels of ours into programmatic edges), so the launch and the block scheduling of one
// kernel overlap the tail of the one before. That is only correct if every such kernel waits for its
// predecessor before it touches memory: pdl_entry() must be the first statement of every kernel in gpu/
// (make layers checks it). griddepcontrol.wait returns once the kernels it depends on have completed and
// their writes are visible; outside a graph, or on an ordinary edge, it returns at once. Then the kernel
// lets its own successor be launched: its blocks start as this kernel's leave room, and wait in turn.
#pragma once

// When a kernel lets its successor launch (griddepcontrol.launch_dependents) matters: each block that does so pays
// for it (about 0.1 us on an H200), which a kernel of tens of thousands of short blocks (an fp32-to-bf16
// conversion, YOLO26's depthwise maps) feels, while the successor needs it only once its last blocks are
// running. So only the last PDL_LAST_BLOCKS blocks (more than one wave of an H200's) do it; the others leave
// it to their exit. PDL_TRIGGER (a compile-time switch, to measure; bench/RESULTS.md): 0 the last blocks
// (default), 1 no block (the successor starts as the last block exits), 2 one thread of every block, 3 every
// thread of every block.
#ifndef PDL_TRIGGER
#define PDL_TRIGGER 0
#endif
enum { PDL_LAST_BLOCKS = 2048 };

__device__ static inline void pdl_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#if PDL_TRIGGER == 0
    unsigned long long n = (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
    unsigned long long b = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    if (n - b <= PDL_LAST_BLOCKS) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#elif PDL_TRIGGER == 2
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#elif PDL_TRIGGER == 3
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#endif
}
