// graph_pdl.c: programmatic edges between the kernels of a recorded step. A stream capture of the step is a
// chain: each node waits for the whole of the one before. Between two kernels that wait costs the second's
// launch and block scheduling after the first has drained, a few microseconds that a batch-16 step pays
// about 2,600 times. A programmatic edge lets the second kernel start as the first one's blocks have all
// begun (they trigger it in pdl_entry(), gpu/pdl.cuh), and its blocks wait in griddepcontrol.wait until
// the first has completed and its writes are visible. So the order and the results are the same; only the
// gaps shrink.
// Which kernels are ours: a kernel node whose function lies in this executable's code (the libraries'
// kernels are in their shared objects) and whose name is a global-namespace function ending in "_kernel"
// (every kernel of gpu/*.cu; CUB's and Thrust's, compiled into our code, live in namespaces).
#include "gpu/graph_pdl.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/switches.h"

extern const char __executable_start[], etext[];   // the linker's bounds of this executable's code

// _Z<len><name>...: a function at global scope; is <name> "*_kernel"?
static int our_name(const char *mangled) {
    if (strncmp(mangled, "_Z", 2) != 0) return 0;
    const char *p = mangled + 2;
    char *end;
    long len = strtol(p, &end, 10);
    if (end == p || len < 7 || (long)strlen(end) < len) return 0;
    return strncmp(end + len - 7, "_kernel", 7) == 0;
}

static int ours(cudaGraphNode_t node) {
    enum cudaGraphNodeType t;
    struct cudaKernelNodeParams p;
    const char *name = NULL;
    if (cudaGraphNodeGetType(node, &t) != cudaSuccess || t != cudaGraphNodeTypeKernel) return 0;
    if (cudaGraphKernelNodeGetParams(node, &p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    const char *f = (const char *)p.func;
    if (f < __executable_start || f >= etext) return 0;
    if (cudaFuncGetName(&name, p.func) != cudaSuccess || !name) {
        cudaGetLastError();
        return 0;
    }
    return our_name(name);
}

static int is_kernel(cudaGraphNode_t node) {
    enum cudaGraphNodeType t;
    return cudaGraphNodeGetType(node, &t) == cudaSuccess && t == cudaGraphNodeTypeKernel;
}

static size_t degree(cudaGraphNode_t node, int out) {
    size_t n = 0;
    cudaError_t rc = out ? cudaGraphNodeGetDependentNodes(node, NULL, NULL, &n)
                         : cudaGraphNodeGetDependencies(node, NULL, NULL, &n);
    return rc == cudaSuccess ? n : 0;
}

long graph_pdl_edges(cudaGraph_t g, int device, size_t *kernels) {
    int major = 0;
    *kernels = 0;
    if (switch_is(SW_PDL, "0") || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        major < 9)
        return 0;
    size_t n = 0;
    if (cudaGraphGetEdges(g, NULL, NULL, NULL, &n) != cudaSuccess) return cudaGetLastError(), 0;
    cudaGraphNode_t *from = malloc((n + 1) * sizeof *from), *to = malloc((n + 1) * sizeof *to);
    cudaGraphEdgeData *data = calloc(n + 1, sizeof *data);
    long turned = 0;
    if (!from || !to || !data || cudaGraphGetEdges(g, from, to, data, &n) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    for (size_t k = 0; k < n; k++) {
        if (data[k].type != cudaGraphDependencyTypeDefault || data[k].from_port != cudaGraphKernelNodePortDefault)
            continue;
        if (!is_kernel(from[k]) || !ours(to[k]) || degree(from[k], 1) != 1 || degree(to[k], 0) != 1) continue;
        cudaGraphEdgeData pdl = { 0 };
        pdl.type = cudaGraphDependencyTypeProgrammatic;
        pdl.from_port = cudaGraphKernelNodePortProgrammatic;
        if (cudaGraphRemoveDependencies(g, &from[k], &to[k], &data[k], 1) != cudaSuccess) {
            cudaGetLastError();
            break;
        }
        if (cudaGraphAddDependencies(g, &from[k], &to[k], &pdl, 1) != cudaSuccess) {
            cudaGetLastError();
            cudaGraphAddDependencies(g, &from[k], &to[k], &data[k], 1);   // the edge back as it was
            break;
        }
        turned++;
    }
    size_t nodes = 0;
    if (cudaGraphGetNodes(g, NULL, &nodes) == cudaSuccess) {
        cudaGraphNode_t *all = malloc((nodes + 1) * sizeof *all);
        if (all && cudaGraphGetNodes(g, all, &nodes) == cudaSuccess)
            for (size_t k = 0; k < nodes; k++) *kernels += is_kernel(all[k]);
        free(all);
    }
    free(from);
    free(to);
    free(data);
    return turned;
}
