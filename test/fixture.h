// fixture.h: what the tests against the shared reference fixtures (gelan-s, yolov9-s dual, YOLO26-s;
// ../shared/fixtures/README.md) share: the json scalars, the fixture's inputs, and a report of the
// worst element per group of tensors. Include after test/test.h.
#pragma once
#include "core/spec/model.h"
#include "core/base/switches.h"
#include "io/safetensors.h"

// A number of the fixture's json: element `index` of "key" (a number or an array); NAN if absent.
static inline double json_number(const char *path, const char *key, int index) {
    FILE *f = fopen(path, "r");
    if (!f) return NAN;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    char *p = strstr(buf, pat);
    if (!p || !(p = strchr(p + strlen(pat), ':'))) return NAN;
    p++;
    while (*p == ' ' || *p == '\n' || *p == '[') p++;
    for (int i = 0; i < index; i++) { p = strchr(p, ','); if (!p) return NAN; p++; }
    return strtod(p, NULL);
}

// The worst element of a group of tensors, as a fraction of its tolerance.
typedef struct { int n_tensors, n_bad; double worst; char name[160]; } Report;

static inline void report_add(Report *r, const char *name, double ratio, int bad) {
    r->n_tensors++;
    r->n_bad += bad > 0;
    if (ratio > r->worst) { r->worst = ratio; snprintf(r->name, sizeof r->name, "%s", name); }
    if (bad || switch_str(SW_VERBOSE)) printf("    %-56s %s (%.2f of tolerance)\n", name, bad ? "DIFFERS" : "ok", ratio);
}

static inline void print_report(const char *what, const Report *r) {
    printf("    %s: %d tensors, %d differ; worst %s at %.2f of tolerance\n", what, r->n_tensors, r->n_bad, r->name,
           r->worst);
}

// Every BN running mean and variance of m (in `state`) against the fixture's bn_after/<name>, each
// element within 1e-6 + rtol·|ref|.
static inline void compare_bn(const SafeTensors *st, const Model *m, const float *state, double rtol, Report *r) {
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        if (p->kind != PK_RUNNING_MEAN && p->kind != PK_RUNNING_VAR) continue;
        char name[256];
        Err err;
        snprintf(name, sizeof name, "bn_after/%s", p->name);
        float *ref = xmalloc(p->n * sizeof(float));
        if (!st_read_f32(st, name, ref, p->n, &err)) {
            double ratio = 0;
            int bad = 0;
            for (size_t j = 0; j < p->n; j++) {
                double e = fabs(state[p->offset + j] - ref[j]), lim = 1e-6 + rtol * fabs(ref[j]);
                bad += !(e <= lim);
                ratio = fmax(ratio, e / lim);
            }
            report_add(r, p->name, ratio, bad);
        }
        free(ref);
    }
}

typedef struct {         // the fixture's inputs, NHWC
    int    N, H, W, G;
    float *images, *targets;
} Inputs;

static inline int read_inputs(const SafeTensors *st, Inputs *in, Err *err) {
    const StTensor *im = st_find(st, "input/images"), *tg = st_find(st, "input/targets");
    if (!im || !tg) return err_set(err, "%s: no input/images or input/targets", st->path);
    in->N = (int)im->shape[0]; in->H = (int)im->shape[2]; in->W = (int)im->shape[3]; in->G = (int)tg->shape[0];
    size_t n = (size_t)in->N * 3 * in->H * in->W;
    float *x = xmalloc(n * sizeof(float));
    in->targets = xmalloc((size_t)in->G * 6 * sizeof(float));
    int rc = st_read_f32(st, "input/images", x, n, err) ||
             st_read_f32(st, "input/targets", in->targets, (size_t)in->G * 6, err);
    in->images = nchw_to_nhwc(x, in->N, 3, in->H, in->W);
    free(x);
    return rc ? -1 : 0;
}
