// graph_pdl.h: programmatic edges between the kernels of a recorded step (gpu/pdl.cuh says why and how).
#pragma once
#include <cuda_runtime_api.h>
#include <stddef.h>

// Turns the edges of graph g between two consecutive kernels into programmatic ones where the second is
// ours (it begins with pdl_entry()) and neither kernel has another edge that way; on a GPU before sm_90,
// or with YT_PDL=0, changes nothing. Returns the edges turned (an edge that cannot be turned stays as it
// was, and so do the rest); *kernels: the graph's kernel nodes.
long graph_pdl_edges(cudaGraph_t g, int device, size_t *kernels);
