// model_info.c: `yolotrain info`: the layer table with parameters, FLOPs and output shapes.
#include <string.h>

#include "core/spec/model.h"

// 1234567 -> "1,234,567"
static const char *grouped(size_t v, char *buf) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%zu", v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

static void from_text(const LayerInfo *li, char *buf, size_t size) {
    if (li->n_from == 1) { snprintf(buf, size, "%d", li->from[0]); return; }
    int o = snprintf(buf, size, "[");
    for (int i = 0; i < li->n_from && o < (int)size - 8; i++)
        o += snprintf(buf + o, size - o, "%s%d", i ? ", " : "", li->from[i]);
    snprintf(buf + o, size - o, "]");
}

static void shape_text(const Model *m, int v, char *buf, size_t size) {
    snprintf(buf, size, "%d x %d x %d", m->values[v].C, m->vh[v], m->vw[v]);
}

// The parameters of the inference form (export.h): those of the nodes the main head needs, and its DFL
// (none in the end-to-end head).
static size_t inference_params(const Model *m) {
    size_t n = m->end2end ? 0 : (size_t)m->reg_max;
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        const ConvUnit *u[2] = { &nd->cv, &nd->cv2 };
        for (int k = 0; k < 2 && !nd->train_only; k++) {
            const int idx[4] = { u[k]->w, u[k]->b, u[k]->bn_w, u[k]->bn_b };
            for (int j = 0; j < 4; j++) n += idx[j] >= 0 ? m->params[idx[j]].n : 0;
        }
    }
    return n;
}

void model_print_info(const Model *m, const Config *cfg, FILE *f) {
    Model *mm = (Model *)m;          // sizes only: set the planned input size
    model_set_size(mm, m->imgsz, m->imgsz);
    char a[32], from[48], shape[96];
    int fw = 14;                     // the from column, wide enough for a dual head's six inputs
    for (int i = 0; i < m->n_layers; i++) {
        from_text(&m->layers[i], from, sizeof from);
        if ((int)strlen(from) > fw) fw = (int)strlen(from);
    }
    fprintf(f, "%4s  %-*s %-14s %-24s %12s  %s\n", "#", fw, "from", "module", "arguments", "params",
            "output (C x H x W)");
    for (int i = 0; i < m->n_layers; i++) {
        const LayerInfo *li = &m->layers[i];
        from_text(li, from, sizeof from);
        if (li->out >= 0) shape_text(m, li->out, shape, sizeof shape);
        else {
            int o = 0;
            for (int l = 0; l < m->n_levels && o < (int)sizeof shape - 24; l++) {
                char s1[32];
                shape_text(m, m->head[l], s1, sizeof s1);
                o += snprintf(shape + o, sizeof shape - o, "%s%s", l ? ", " : "", s1);
            }
            if (m->n_aux) snprintf(shape + o, sizeof shape - o, m->end2end ? " (one-to-one; one-to-many the same)"
                                                                          : " (main; aux the same)");
        }
        fprintf(f, "%4d  %-*s %-14s %-24s %12s  %s\n", i, fw, from, li->module, li->args, grouped(li->params, a), shape);
    }
    int anchors = 0;
    for (int l = 0; l < m->n_levels; l++) anchors += m->vh[m->head[l]] * m->vw[m->head[l]];
    fprintf(f, "%s: %d layers, %s parameters, %d state-dict tensors, %.1f GFLOPs at %d (2 x multiply-adds), nc=%d, "
            "%d anchors\n", cfg->file, m->n_layers, grouped(model_count_params(m), a), model_count_tensors(m),
            model_flops(m, m->imgsz) / 1e9, m->imgsz, m->nc, anchors);
    if (m->end2end)
        fprintf(f, "end-to-end head: the one-to-many branch is for training only; inference (one-to-one, no NMS) "
                   "uses %s parameters\n", grouped(inference_params(m), a));
    else if (m->n_aux)
        fprintf(f, "auxiliary branch and head for training only (PGI): `yolotrain export` leaves %s parameters\n",
                grouped(inference_params(m), a));
}
