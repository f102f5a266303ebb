// loss_host.c: see loss_host.h.
#include "core/spec/loss_host.h"

#include <stdlib.h>
#include <string.h>

#define R LOSS_REG_MAX

int loss_check_maps(const LossBatch *b, int *A, Err *err) {
    int N = b->head[0].N, C = 4 * R + b->nc;
    *A = 0;
    if (b->nc < 1) return err_set(err, "loss: nc = %d; need at least one class", b->nc);
    for (int l = 0; l < LOSS_LEVELS; l++) {
        Map m = b->head[l];
        if (m.N != N || m.C != C || m.H < 1 || m.W < 1 || m.ld < m.C)
            return err_set(err, "loss: head map P%d is %dx%dx%dx%d (ld %d); expected N=%d, C=4*%d+%d=%d",
                           l + 3, m.N, m.H, m.W, m.C, m.ld, N, R, b->nc, C);
        if (b->img_h % m.H || b->img_w % m.W || b->img_h / m.H != b->img_w / m.W)
            return err_set(err, "loss: head map P%d is %dx%d, which is no integer stride of the %dx%d image",
                           l + 3, m.H, m.W, b->img_h, b->img_w);
        *A += m.H * m.W;
    }
    return 0;
}

static int check_map(Map m, Map ref, int C, const char *what, int br, int l, Err *err) {
    if (m.N != ref.N || m.H != ref.H || m.W != ref.W || m.C != C || m.ld < m.C || !m.data)
        return err_set(err, "loss26: %s map P%d of branch %d is %dx%dx%dx%d (ld %d); expected %dx%dx%dx%d",
                       what, l + 3, br, m.N, m.H, m.W, m.C, m.ld, ref.N, ref.H, ref.W, C);
    return 0;
}

int loss26_check_maps(const Loss26Batch *b, int *A, Err *err) {
    *A = 0;
    if (b->nc < 1) return err_set(err, "loss26: nc = %d; need at least one class", b->nc);
    for (int l = 0; l < L26_LEVELS; l++) {
        Map ref = b->head[L26_O2M].box[l];
        if (ref.N < 1 || ref.H < 1 || ref.W < 1 || b->img_h % ref.H || b->img_w % ref.W ||
            b->img_h / ref.H != b->img_w / ref.W)
            return err_set(err, "loss26: map P%d is %dx%d, which is no integer stride of the %dx%d image",
                           l + 3, ref.H, ref.W, b->img_h, b->img_w);
        if (ref.N != b->head[L26_O2M].box[0].N)
            return err_set(err, "loss26: map P%d has batch %d, P3 has %d", l + 3, ref.N, b->head[0].box[0].N);
        for (int br = 0; br < L26_BRANCHES; br++)
            if (check_map(b->head[br].box[l], ref, 4, "box", br, l, err) ||
                check_map(b->head[br].cls[l], ref, b->nc, "class", br, l, err)) return -1;
        *A += ref.H * ref.W;
    }
    return 0;
}

int loss_group_targets(const float *targets, int nt, int N, int nc, int *begin, int *fill, Err *err) {
    memset(begin, 0, (size_t)(N + 1) * sizeof(int));
    for (int i = 0; i < nt; i++) {
        const float *t = targets + 6 * i;
        if (loss_check_target(t, i, N, nc, err)) return -1;
        begin[(int)t[0] + 1]++;
    }
    for (int n = 0; n < N; n++) begin[n + 1] += begin[n];
    for (int n = 0; n < N; n++) fill[n] = begin[n];
    return 0;
}

void loss_index_reserve(LossIndex *ix, int N, int A) {
    if ((size_t)N > ix->cap_images || !ix->begin) {
        ix->cap_images = (size_t)N;
        ix->begin = xrealloc(ix->begin, (size_t)(N + 1) * sizeof(int));
        ix->fill = xrealloc(ix->fill, (size_t)(N + 1) * sizeof(int));
    }
    if ((size_t)A > ix->cap_anchors) {
        ix->cap_anchors = (size_t)A;
        ix->anchor = xrealloc(ix->anchor, (size_t)A * sizeof(LossAnchor));
    }
}

void loss_index_anchors(LossIndex *ix, const Map maps[3], int img_h) {
    int a = 0;
    for (int l = 0; l < 3; l++) {
        Map m = maps[l];
        double stride = (double)img_h / m.H;
        for (int y = 0; y < m.H; y++)
            for (int x = 0; x < m.W; x++) ix->anchor[a++] = (LossAnchor){ l, y, x, x + 0.5, y + 0.5, stride };
    }
}

void loss_index_free(LossIndex *ix) {
    free(ix->anchor);
    free(ix->begin);
    free(ix->fill);
    *ix = (LossIndex){ 0 };
}
