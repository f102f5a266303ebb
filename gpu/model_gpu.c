// model_gpu.c: moves a built model onto one GPU (see model_gpu.h).
#include "gpu/model_gpu.h"

#include <stdlib.h>
#include <string.h>

#include "gpu/ops.h"
#include "gpu/ops26.h"

static size_t fl(size_t n) { return (n * sizeof(float) + 255) & ~(size_t)255; }

// The weights a GEMM reads permuted (gpu/conv.cu needs_permute: R·S > 1 and Cg > 1) as segments
// {start, end, Cg, R·S} of the state, by start, into seg (when not NULL); returns how many.
static int permuted_weights(const Model *m, int *seg) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        if (nd->op != OP_CONV && nd->op != OP_REPCONV) continue;
        for (int u = 0; u < 2; u++) {
            const ConvUnit *cu = u ? &nd->cv2 : &nd->cv;
            const ConvDims *d = &cu->d;
            if (cu->w < 0 || d->R * d->S == 1 || d->C / d->groups == 1) continue;
            const ParamInfo *p = &m->params[cu->w];
            if (seg) {   // insert in start order
                int j = n;
                for (; j > 0 && seg[4 * (j - 1)] > (int)p->offset; j--) memcpy(seg + 4 * j, seg + 4 * (j - 1), 4 * sizeof(int));
                int *s = seg + 4 * j;
                s[0] = (int)p->offset, s[1] = (int)(p->offset + p->n), s[2] = d->C / d->groups, s[3] = d->R * d->S;
            }
            n++;
        }
    }
    return n;
}

GpuPlan model_gpu_plan(const Model *m, GpuPrecision prec, int optim_states) {
    Device probe;
    device_defaults(&probe, 0);
    probe.precision = prec;
    size_t scratch = 0;
    for (int i = 0; i < m->n_nodes; i++) {            // the largest scratch any single op asks for
        const Node *nd = &m->nodes[i];
        if (nd->op == OP_MAXPOOL) {
            size_t a = maxpool_workspace_bytes_gpu(model_value(m, nd->out, m->max_n));
            if (a > scratch) scratch = a;
        }
        if (nd->op == OP_ATTN) {
            Map x = model_value(m, nd->in, m->max_n);
            AttnDims ad = nd->attn;
            ad.N = m->max_n; ad.H = x.H; ad.W = x.W;
            size_t a = attn_workspace_bytes_gpu(&ad);
            if (a > scratch) scratch = a;
        }
        for (int u = 0; u < 2; u++) {
            const ConvUnit *cu = u ? &nd->cv2 : &nd->cv;
            if (cu->w < 0 || (nd->op != OP_CONV && nd->op != OP_REPCONV)) continue;
            const ConvDims *d = &cu->d;
            DwDims dd = dw_dims(d->N, d->C, d->H, d->W, d->R, d->stride);
            size_t c = unit_is_dw(cu) ? dwconv_workspace_bytes_gpu(&dd) : conv_workspace_bytes_gpu(&probe, d);
            Map z = map_make(NULL, cu->d.N, cu->d.P, cu->d.Q, cu->d.K);
            size_t b = bn_workspace_bytes_gpu(z) * (nd->op == OP_REPCONV ? 2 : 1);   // both branches' at once
            if (cu->bn_w >= 0 && d->R == 1 && d->S == 1 && d->stride == 1) {   // gpu/conv_bn.cu's partials
                size_t f = conv_bn_workspace_bytes_gpu(d);
                if (f > scratch) scratch = f;
            }
            if (c > scratch) scratch = c;
            if (b > scratch) scratch = b;
        }
    }
    GpuPlan p = { { 0 }, fl(model_act_floats(m, prec == GPU_BF16)), fl(m->n_dact + 1), fl(m->n_stats + 1), 2 * fl(m->n_tmp + 1), 0 };
    // + the bf16 copy and its permuted segments' table
    p.arena[ARENA_PARAMS] = fl(m->n_state) + (prec == GPU_BF16 ? fl((m->n_state + 1) / 2) + fl(4 * permuted_weights(m, NULL) + 1) : 0);
    p.arena[ARENA_GRADS] = fl(m->n_state);
    p.arena[ARENA_OPTIM] = optim_states ? optim_states * fl(m->n_state) + ((size_t)1 << 20) : 0;
    p.arena[ARENA_ACTS] = p.acts + p.grads_of_acts + p.stats + p.temps;
    // + room for the loss and small reductions, and for augmentation on the device (made before the forward,
    // so never beside an op's scratch; counted on top all the same: the plan stays a plain sum): one sample's
    // (the backend's dev.augment), or with augment=gpu a micro-batch's bodies and tables, in one launch
    p.augment = augment_scratch_bytes_gpu(m->imgsz, m->augment_side, m->augment_side ? m->max_n : 0);
    p.arena[ARENA_SCRATCH] = scratch + ((size_t)64 << 20) + p.augment;
    p.arena[ARENA_INPUT] = device_input_arena_bytes((size_t)m->max_n * m->imgsz * m->imgsz * 3);   // two uint8 batches in flight
    p.arena[ARENA_AUG] = m->augment_side ? augment_stage_bytes_gpu(m->max_n, m->augment_side) : 0;   // and their tiles
    return p;
}

GpuPrecision gpu_precision(const char *name) {
    return !strcmp(name, "fp32") ? GPU_FP32 : !strcmp(name, "tf32") ? GPU_TF32 : GPU_BF16;
}

void model_gpu_print_plan(const GpuPlan *p, int id, FILE *f) {
    double g = 1 << 30, total = 0;
    for (int k = 0; k < ARENA_COUNT; k++) total += p->arena[k];
    fprintf(f, "GPU %d memory plan: weights %.2f GiB, grads %.2f GiB, optimizer+EMA %.2f GiB, activations %.2f GiB "
               "(+ their gradients %.2f GiB, BN stats and temporaries %.2f GiB), op scratch %.2f GiB (augmentation %.3f GiB of it), "
               "input staging %.2f GiB, augmentation's tile stages %.2f GiB; total %.2f GiB\n",
            id, p->arena[ARENA_PARAMS] / g, p->arena[ARENA_GRADS] / g, p->arena[ARENA_OPTIM] / g, p->acts / g,
            p->grads_of_acts / g, (p->stats + p->temps) / g, p->arena[ARENA_SCRATCH] / g, p->augment / g,
            p->arena[ARENA_INPUT] / g, p->arena[ARENA_AUG] / g, total / g);
}

int model_to_gpu(Model *m, Device *dev, int id, const GpuPlan *plan, GpuPrecision prec, Err *err) {
    GpuPlan p = plan ? *plan : model_gpu_plan(m, prec, 2);
    if (device_check(id, prec, err) || device_init(dev, id, p.arena, err)) return -1;
    model_plan_storage(m, prec == GPU_BF16);       // the layout p.acts was planned for
    dev->precision = prec;
    // gradients that cuDNN's bf16 data gradients write are stored as the bf16 values they are
    model_plan_grad_storage(m, prec == GPU_BF16 && dev->cudnn ? conv_dgrad_bf16_gpu : NULL);
    float *state = arena_take(&dev->params, fl(m->n_state), 256);
    if (prec == GPU_BF16 && p.arena[ARENA_PARAMS] >= fl(m->n_state) + fl((m->n_state + 1) / 2)) {
        dev->wbf16 = arena_take(&dev->params, fl((m->n_state + 1) / 2), 256);   // the weights as a pass reads them
        dev->wbf16_cap = m->n_state;
        int n = permuted_weights(m, NULL);   // without their table, each such conv permutes its own
        if (n && m->n_state < (size_t)1 << 31 && p.arena[ARENA_PARAMS] >= fl(m->n_state) + fl((m->n_state + 1) / 2) + fl(4 * n + 1) &&
            (dev->wperm_host = malloc(4 * sizeof(int) * n))) {
            permuted_weights(m, dev->wperm_host);
            dev->wperm = arena_take(&dev->params, fl(4 * n), 256);
            checkCuda(cudaMemcpy(dev->wperm, dev->wperm_host, 4 * sizeof(int) * n, cudaMemcpyHostToDevice));
            dev->wperm_n = n;
        }
    }
    float *grad = arena_take(&dev->grads, p.arena[ARENA_GRADS], 256);
    checkCuda(cudaMemcpy(state, m->state, m->n_state * sizeof(float), cudaMemcpyHostToDevice));
    checkCuda(cudaMemset(grad, 0, m->n_state * sizeof(float)));
    // Both run on the legacy stream, which the device's non-blocking streams do not wait for, and a
    // pageable upload may still be in flight when cudaMemcpy returns: done before any kernel reads them.
    checkCuda(cudaDeviceSynchronize());
    free(m->state); free(m->grad); free(m->act); free(m->dact); free(m->stats); free(m->ws);
    free(m->tmp_a); free(m->tmp_b);
    m->state = state;
    m->grad = grad;
    m->act = arena_take(&dev->acts, p.acts, 256);
    m->dact = arena_take(&dev->acts, p.grads_of_acts, 256);
    m->stats = arena_take(&dev->acts, p.stats, 256);
    m->tmp_a = arena_take(&dev->acts, p.temps / 2, 256);
    m->tmp_b = arena_take(&dev->acts, p.temps / 2, 256);
    m->ws = NULL;                                   // the conv twins use the scratch arena
    m->be = backend_gpu_get();                     // YT_FUSE=0: the table without its fused forms
    m->be_ctx = dev;
    m->on_device = 1;
    return 0;
}

void model_gpu_download_state(const Model *m, float *host) {
    m->be->dev.download(m->be_ctx, host, m->state, m->n_state);
}

void model_gpu_upload_state(Model *m, const float *host) {
    m->be->dev.upload(m->be_ctx, m->state, host, m->n_state);
}
