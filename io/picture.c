// picture.c: see picture.h. Layout as the reference's plot_images: ns x ns tiles (ns = ceil(sqrt n)),
// shrunk so the picture is at most 1920 px, on white. Legend: h, w the batch's image size (S x S, or a
// rect batch shape), th, tw the tile's.
#include "io/picture.h"
#include "io/text.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_TILES 16
#define MAX_SIZE  1920

// Ultralytics' Colors palette, so pictures look like the reference's.
static const uint8_t palette[20][3] = {
    { 255, 56, 56 }, { 255, 157, 151 }, { 255, 112, 31 }, { 255, 178, 29 }, { 207, 210, 49 },
    { 72, 249, 10 }, { 146, 204, 23 }, { 61, 219, 134 }, { 26, 147, 52 }, { 0, 212, 187 },
    { 44, 153, 168 }, { 0, 194, 255 }, { 52, 69, 147 }, { 100, 115, 255 }, { 0, 24, 236 },
    { 132, 56, 255 }, { 82, 0, 133 }, { 203, 56, 255 }, { 255, 149, 200 }, { 255, 55, 199 },
};

static void blit(Image *dst, const Image *src, int ox, int oy) {
    for (int y = 0; y < src->h; y++)
        memcpy(dst->px + ((size_t)(oy + y) * dst->w + ox) * 3, src->px + (size_t)y * src->w * 3,
               (size_t)src->w * 3);
}

static void draw_tiles(Image *canvas, const Batch *b, int n, int ns, int tw, int th) {
    static const uint8_t white[3] = { 255, 255, 255 };
    for (int i = 0; i < n; i++) {
        Image view = { b->w, b->h, b->images + (size_t)i * b->h * b->w * 3 };   // read only
        int ox = (i % ns) * tw, oy = (i / ns) * th;
        if (tw == b->w && th == b->h) {
            blit(canvas, &view, ox, oy);
        } else {
            Image tile = image_resize(&view, tw, th, 1);
            blit(canvas, &tile, ox, oy);
            image_free(&tile);
        }
        image_draw_rect(canvas, ox, oy, ox + tw - 1, oy + th - 1, 2, white);
    }
}

// The first `max` characters of the file name of path (UTF-8: a character is not cut).
static void file_name(const char *path, int max, char *out, size_t n) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = 0;
    for (int chars = 0; base[len] && len + 4 < n; len++) {
        if (((unsigned char)base[len] & 0xC0) != 0x80 && chars++ == max) break;   // a character's first byte
    }
    snprintf(out, n, "%.*s", (int)len, base);
}

// Each tile's file name at its top-left, as plot_images: Path(paths[i]).name[:40] at (x + 5, y + 5) in
// (220, 220, 220), no box behind it, font size (h + w) * ns * 0.01 of the tile (11 px at least).
static void draw_files(Image *canvas, char *const *files, int n, int ns, int tw, int th) {
    static const uint8_t grey[3] = { 220, 220, 220 };
    int px = (int)((th + tw) * ns * 0.01);
    if (px < 11) px = 11;
    for (int i = 0; files && i < n; i++) {
        if (!files[i]) continue;
        char name[200];
        file_name(files[i], 40, name, sizeof name);
        text_draw(canvas, (i % ns) * tw + 5, (i / ns) * th + 5, name, px, grey, 0);
    }
}

static void draw_boxes(Image *canvas, const Batch *b, int n, int ns, int tw, int th, char *const *names, int nc) {
    static const uint8_t white[3] = { 255, 255, 255 };
    for (int k = 0; k < b->nt; k++) {
        const float *r = &b->targets[6 * k];   // image, class, cx, cy, w, h
        int i = (int)r[0], cls = (int)r[1];
        if (i >= n) continue;
        int ox = (i % ns) * tw, oy = (i / ns) * th;
        int x1 = ox + (int)lround((r[2] - r[4] / 2) * tw), y1 = oy + (int)lround((r[3] - r[5] / 2) * th);
        int x2 = ox + (int)lround((r[2] + r[4] / 2) * tw), y2 = oy + (int)lround((r[3] + r[5] / 2) * th);
        const uint8_t *c = palette[(cls < 0 ? -cls : cls) % 20];
        image_draw_rect(canvas, x1, y1, x2, y2, 2, c);
        char label[64];
        if (cls >= 0 && cls < nc && names) snprintf(label, sizeof label, "%s", names[cls]);
        else snprintf(label, sizeof label, "%d", cls);
        int px = canvas->w / 80 > 11 ? canvas->w / 80 : 11, lw, lh;   // 16 px on a 1280 px picture
        text_measure(label, px, &lw, &lh);
        lh += 2;                                   // above the box when the tile has room, as box_label
        text_label(canvas, x1, y1 - lh >= oy ? y1 - lh : y1, label, px, white, c, 1, NULL, NULL);
    }
}

int picture_batch(const Batch *in, char *const *names, int nc, char *const *files, const char *path, Err *err) {
    Batch sized = *in;                             // h, w 0 (a caller that sets S only): S x S
    if (!sized.h || !sized.w) sized.h = sized.w = sized.S;
    const Batch *b = &sized;
    int n = b->n < MAX_TILES ? b->n : MAX_TILES;
    if (n < 1) return err_set(err, "%s: the batch has no images to draw", path);
    int ns = (int)ceil(sqrt((double)n));
    double scale = (double)MAX_SIZE / (ns * (b->h > b->w ? b->h : b->w));   // plot_images: max(h, w)
    int tw = scale < 1 ? (int)(b->w * scale) : b->w, th = scale < 1 ? (int)(b->h * scale) : b->h;
    if (tw < 1) tw = 1;
    if (th < 1) th = 1;
    Image canvas = image_new(ns * tw, ((n + ns - 1) / ns) * th, 255);
    draw_tiles(&canvas, b, n, ns, tw, th);
    draw_files(&canvas, files, n, ns, tw, th);
    draw_boxes(&canvas, b, n, ns, tw, th, names, nc);
    int rc = image_save_jpeg(path, &canvas, 90, err);
    image_free(&canvas);
    return rc;
}

int picture_augmented(const Config *cfg, const Dataset *train, const char *path, Err *err) {
    LoaderConfig lc = loader_config(cfg, 1);
    lc.batch = train->n < 16 ? train->n : 16;
    lc.cache_ram = 0;
    lc.defer_pixels = 0;                         // the picture needs the pixels here, whatever augment= says
    Loader *ld;
    if (loader_open(&lc, train, &ld, err)) return -1;
    loader_start_epoch(ld, 0, 1);
    Batch *b;
    char *files[16];
    int rc = err_set(err, "no batch");
    if (loader_next(ld, &b)) {
        for (int i = 0; i < b->n && i < 16; i++) files[i] = train->s[b->index[i]].image;
        rc = picture_batch(b, train->names, train->nc, files, path, err);
    }
    if (rc == 0) loader_release(ld, b);
    loader_close(ld);
    return rc;
}
