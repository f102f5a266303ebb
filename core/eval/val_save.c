// val_save.c: the files `yolotrain val save_json=1 save_txt=1` writes, as YOLOv9's val.py --save-json
// and --save-txt: predictions.json (COCO results: image_id the file stem, a number when it is one;
// category_id the class index in the data.yaml order; for a dataset read from a COCO file, its image ids
// and category ids, so the results score against that file; bbox [x, y, w, h] in original-image pixels
// rounded to 3 decimals; score rounded to 5) and labels/STEM.txt (class cx cy w h, normalised to the
// original image, one detection a line; with save_conf=1 the score ends each line, as --save-conf).
#include "core/eval/val.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int make_dir(const char *path) { return mkdir(path, 0755) && errno != EEXIST ? -1 : 0; }

int val_save_open(ValSave *s, const char *dir, int json, int txt, Err *err) {
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    char buf[4200];
    for (char *p = s->dir + 1; *p; p++)          // mkdir -p
        if (*p == '/') { *p = 0; int bad = make_dir(s->dir); *p = '/'; if (bad) break; }
    if (make_dir(s->dir)) return err_set(err, "%s: cannot create the folder (%s): choose another with project= / name=", dir, strerror(errno));
    if (txt) {
        snprintf(buf, sizeof buf, "%s/labels", s->dir);
        if (make_dir(buf)) return err_set(err, "%s: cannot create the folder (%s)", buf, strerror(errno));
        s->txt = 1;
    }
    if (json) {
        snprintf(buf, sizeof buf, "%s/predictions.json", s->dir);
        if (!(s->json = fopen(buf, "w"))) return err_set(err, "%s: cannot write (%s)", buf, strerror(errno));
        fputc('[', s->json);
        s->first = 1;
    }
    return 0;
}

// The file name without folder and extension.
static void stem_of(const char *path, char *out, size_t n) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t len = dot && dot > base ? (size_t)(dot - base) : strlen(base);
    snprintf(out, n, "%.*s", (int)len, base);
}

static int numeric(const char *s) {
    if (!*s) return 0;
    for (; *s; s++) if (!isdigit((unsigned char)*s)) return 0;
    return 1;
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static double round_to(double x, double scale) { return round(x * scale) / scale; }

void val_save_image(ValSave *s, const Sample *smp, const Det *d, int nd) {
    char stem[1024];
    stem_of(smp->image, stem, sizeof stem);
    for (int i = 0; s->json && i < nd; i++) {
        fprintf(s->json, "%s\n {\"image_id\": ", s->first ? "" : ",");
        s->first = 0;
        if (smp->has_id) fprintf(s->json, "%lld", smp->id);
        else if (numeric(stem) && strlen(stem) < 18) fprintf(s->json, "%lld", strtoll(stem, NULL, 10));   // int(stem)
        else json_string(s->json, stem);
        fprintf(s->json, ", \"category_id\": %lld, \"bbox\": [%.10g, %.10g, %.10g, %.10g], \"score\": %.10g}",
                s->category_id ? s->category_id[d[i].cls] : d[i].cls,
                round_to(d[i].x1, 1e3), round_to(d[i].y1, 1e3), round_to((double)d[i].x2 - d[i].x1, 1e3),
                round_to((double)d[i].y2 - d[i].y1, 1e3), round_to(d[i].conf, 1e5));
    }
    if (!s->txt) return;
    char path[5200];
    snprintf(path, sizeof path, "%s/labels/%s.txt", s->dir, stem);
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "warning: %s: cannot write (%s)\n", path, strerror(errno)); return; }
    for (int i = 0; i < nd; i++) {
        float w0 = (float)smp->w, h0 = (float)smp->h;
        fprintf(f, "%d %g %g %g %g", d[i].cls, (d[i].x1 + d[i].x2) / 2 / w0, (d[i].y1 + d[i].y2) / 2 / h0,
                (d[i].x2 - d[i].x1) / w0, (d[i].y2 - d[i].y1) / h0);
        if (s->conf) fprintf(f, " %g", d[i].conf);
        fputc('\n', f);
    }
    if (fclose(f)) fprintf(stderr, "warning: %s: write failed (%s)\n", path, strerror(errno));
}

int val_save_close(ValSave *s, Err *err) {
    if (!s->json) return 0;
    fputs("\n]\n", s->json);
    int bad = ferror(s->json) | fclose(s->json);
    s->json = NULL;
    return bad ? err_set(err, "%s/predictions.json: write failed (disk full?)", s->dir) : 0;
}
