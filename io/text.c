// text.c: see text.h. A string is rendered into a coverage map (one byte per pixel, 0..255), which is
// then blended into the picture, turned when asked. FreeType faces are opened once and kept: the first
// is fontconfig's sans-serif (DejaVu Sans on Debian); a character it lacks is looked up through
// fontconfig and the face that has it joins the list. One mutex: FreeType faces are not thread-safe.
// YT_FONT=FILE uses that font file first; YT_FONT=none the bitmap font (tests).
#include "io/text.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/switches.h"

#ifdef USE_FREETYPE
#include <ft2build.h>
#include FT_FREETYPE_H
#endif
#ifdef USE_FONTCONFIG
#include <fontconfig/fontconfig.h>
#endif

typedef struct { int w, h; uint8_t *a; } Cover;   // (h, w) coverage

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int said;                                   // the one-line note about fonts was printed

static void say_once(const char *msg) {
    if (said) return;
    said = 1;
    fprintf(stderr, "note: %s\n", msg);
}

// The next code point of a UTF-8 string; a malformed sequence gives U+FFFD and skips one byte.
static uint32_t utf8_next(const unsigned char **s) {
    const unsigned char *p = *s;
    uint32_t c = p[0];
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0) { *s = p + 1; return 0xFFFD; }
    c &= n ? 0x3F >> n : 0x7F;
    for (int i = 1; i <= n; i++) {
        if ((p[i] & 0xC0) != 0x80) { *s = p + 1; return 0xFFFD; }
        c = c << 6 | (p[i] & 0x3F);
    }
    *s = p + 1 + n;
    return c;
}

// ---- FreeType ------------------------------------------------------------------------------

#ifdef USE_FREETYPE
enum { MAX_FACES = 8, MAX_MISSING = 64 };
static FT_Library lib;
static FT_Face faces[MAX_FACES];
static char *face_file[MAX_FACES];
static int n_faces, ft_tried;
static uint32_t missing[MAX_MISSING];              // code points no font has (not asked again)
static int n_missing;

static const char *const KNOWN_FILES[] = {        // when fontconfig is absent or finds nothing
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf", "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf", NULL,
};

static int add_face(const char *file, int index) {
    for (int i = 0; i < n_faces; i++) if (!strcmp(face_file[i], file)) return -1;   // has been asked
    if (n_faces == MAX_FACES || FT_New_Face(lib, file, index, &faces[n_faces])) return -1;
    if (!FT_IS_SCALABLE(faces[n_faces])) { FT_Done_Face(faces[n_faces]); return -1; }
    face_file[n_faces] = strdup(file);
    return n_faces++;
}

#ifdef USE_FONTCONFIG
static void fc_done(void) { FcFini(); }        // fontconfig's own state, else a leak checker reports it

// The file of fontconfig's best sans-serif font having cp (0: any), or -1.
static int fc_lookup(uint32_t cp) {
    static int started;
    if (!started) {
        if (!FcInit()) return -1;
        started = 1;
        atexit(fc_done);
    }
    FcPattern *p = FcNameParse((const FcChar8 *)"sans-serif");
    FcPatternAddBool(p, FC_SCALABLE, FcTrue);
    if (cp) {
        FcCharSet *cs = FcCharSetCreate();
        FcCharSetAddChar(cs, cp);
        FcPatternAddCharSet(p, FC_CHARSET, cs);
        FcCharSetDestroy(cs);
    }
    FcConfigSubstitute(NULL, p, FcMatchPattern);
    FcDefaultSubstitute(p);
    FcResult r;
    FcPattern *m = FcFontMatch(NULL, p, &r);
    int got = -1, index = 0;
    FcChar8 *file;
    FcCharSet *have;
    if (m && FcPatternGetString(m, FC_FILE, 0, &file) == FcResultMatch &&
        (!cp || (FcPatternGetCharSet(m, FC_CHARSET, 0, &have) == FcResultMatch && FcCharSetHasChar(have, cp)))) {
        FcPatternGetInteger(m, FC_INDEX, 0, &index);
        got = add_face((const char *)file, index);
    }
    if (m) FcPatternDestroy(m);
    FcPatternDestroy(p);
    return got;
}
#else
static int fc_lookup(uint32_t cp) { (void)cp; return -1; }
#endif

static int ft_ready(void) {
    if (ft_tried) return n_faces > 0;
    ft_tried = 1;
    const char *env = switch_str(SW_FONT);
    if (env && !strcmp(env, "none")) { say_once("YT_FONT=none: pictures use the built-in 5x7 font (ASCII only)"); return 0; }
    if (FT_Init_FreeType(&lib)) { say_once("FreeType did not start: pictures use the built-in 5x7 font (ASCII only)"); return 0; }
    if (env && env[0]) add_face(env, 0);
    if (!n_faces) fc_lookup(0);
    for (int i = 0; !n_faces && KNOWN_FILES[i]; i++) add_face(KNOWN_FILES[i], 0);
    if (!n_faces)
        say_once("no TrueType font found (fontconfig, /usr/share/fonts; Debian: fonts-dejavu-core): pictures use the "
                 "built-in 5x7 font (ASCII only)");
    return n_faces > 0;
}

// The face and glyph that draw cp: the first face that has it, else one fontconfig finds, else the
// first face's missing-glyph box (said once).
static FT_Face glyph_for(uint32_t cp, FT_UInt *gi) {
    for (int i = 0; i < n_faces; i++) if ((*gi = FT_Get_Char_Index(faces[i], cp))) return faces[i];
    int known = 0;
    for (int i = 0; i < n_missing; i++) known |= missing[i] == cp;
    if (!known) {
        int f = fc_lookup(cp);
        if (f >= 0 && (*gi = FT_Get_Char_Index(faces[f], cp))) return faces[f];
        if (n_missing < MAX_MISSING) missing[n_missing++] = cp;
        char msg[160];
        snprintf(msg, sizeof msg, "no installed font has the character U+%04X: it is drawn as a box (install a "
                 "font that has it, e.g. fonts-noto-core)", (unsigned)cp);
        say_once(msg);
    }
    *gi = 0;
    return faces[0];
}

// Measure (c == NULL) or render utf8 at px into c (allocated here).
static void ft_text(const char *utf8, int px, Cover *c, int *w, int *h) {
    FT_Set_Pixel_Sizes(faces[0], 0, px);
    int asc = (int)((faces[0]->size->metrics.ascender + 63) >> 6), desc = (int)((-faces[0]->size->metrics.descender + 63) >> 6);
    long pen = 0;                                  // 26.6 fixed point
    const unsigned char *s = (const unsigned char *)utf8;
    while (*s) {
        FT_UInt gi;
        FT_Face f = glyph_for(utf8_next(&s), &gi);
        FT_Set_Pixel_Sizes(f, 0, px);
        if (FT_Load_Glyph(f, gi, c ? FT_LOAD_RENDER : FT_LOAD_DEFAULT)) continue;
        FT_GlyphSlot g = f->glyph;
        for (unsigned r = 0; c && r < g->bitmap.rows; r++)
            for (unsigned k = 0; k < g->bitmap.width; k++) {
                int x = (int)(pen >> 6) + g->bitmap_left + (int)k, y = asc - g->bitmap_top + (int)r;
                uint8_t v = g->bitmap.buffer[r * g->bitmap.pitch + k];
                if (x >= 0 && y >= 0 && x < c->w && y < c->h && v > c->a[y * c->w + x]) c->a[y * c->w + x] = v;
            }
        pen += g->advance.x;
    }
    *w = (int)((pen + 63) >> 6);
    *h = asc + desc;
}
#else
static int ft_ready(void) {
    say_once("built without FreeType (libfreetype-dev): pictures use the built-in 5x7 font (ASCII only)");
    return 0;
}
static void ft_text(const char *utf8, int px, Cover *c, int *w, int *h) { (void)utf8; (void)px; (void)c; *w = *h = 0; }
#endif

// ---- the bitmap font -----------------------------------------------------------------------

static int bitmap_scale(int px) { int s = (px + 3) / 10; return s < 1 ? 1 : s; }   // 11 px: 1, 21 px: 2

static void bitmap_text(const char *utf8, int px, Cover *c, int *w, int *h) {
    char ascii[1024];                              // one '?' per non-ASCII character
    int n = 0;
    const unsigned char *s = (const unsigned char *)utf8;
    while (*s && n < (int)sizeof ascii - 1) { uint32_t cp = utf8_next(&s); ascii[n++] = cp < 128 ? (char)cp : '?'; }
    ascii[n] = 0;
    image_text_size(ascii, bitmap_scale(px), w, h);
    if (!c) return;
    static const uint8_t white[3] = { 255, 255, 255 };
    Image im = image_new(c->w, c->h, 0);
    image_draw_text_scaled(&im, 0, 0, bitmap_scale(px), ascii, white, NULL);
    for (int i = 0; i < c->w * c->h; i++) c->a[i] = im.px[3 * i];
    image_free(&im);
}

// ---- drawing -------------------------------------------------------------------------------

static void measure_locked(const char *utf8, int px, int *w, int *h) {
    if (ft_ready()) ft_text(utf8, px, NULL, w, h);
    else bitmap_text(utf8, px, NULL, w, h);
}

void text_measure(const char *utf8, int px, int *w, int *h) {
    pthread_mutex_lock(&mu);
    measure_locked(utf8, px, w, h);
    pthread_mutex_unlock(&mu);
}

int text_built_with_freetype(void) {
#ifdef USE_FREETYPE
    return 1;
#else
    return 0;
#endif
}

int text_has_font(void) {
    pthread_mutex_lock(&mu);
    int ok = ft_ready();
    pthread_mutex_unlock(&mu);
    return ok;
}

static void blend(Image *im, int x, int y, const uint8_t rgb[3], int a) {
    if (x < 0 || y < 0 || x >= im->w || y >= im->h || !a) return;
    uint8_t *p = im->px + 3 * ((size_t)y * im->w + x);
    for (int k = 0; k < 3; k++) p[k] = (uint8_t)(p[k] + ((int)rgb[k] - p[k]) * a / 255);
}

void text_draw(Image *im, int x, int y, const char *utf8, int px, const uint8_t rgb[3], int rot90) {
    pthread_mutex_lock(&mu);
    Cover c = { 0, 0, NULL };
    measure_locked(utf8, px, &c.w, &c.h);
    if (c.w > 0 && c.h > 0) {
        c.a = xcalloc((size_t)c.w * c.h, 1);
        int w, h;
        if (ft_ready()) ft_text(utf8, px, &c, &w, &h);
        else bitmap_text(utf8, px, &c, &w, &h);
        for (int v = 0; v < c.h; v++)
            for (int u = 0; u < c.w; u++) {
                int a = c.a[v * c.w + u];
                if (rot90) blend(im, x + v, y + c.w - 1 - u, rgb, a);
                else blend(im, x + u, y + v, rgb, a);
            }
        free(c.a);
    }
    pthread_mutex_unlock(&mu);
}

void text_label(Image *im, int x, int y, const char *utf8, int px, const uint8_t fg[3], const uint8_t bg[3],
                int pad, int *bw, int *bh) {
    int w, h;
    text_measure(utf8, px, &w, &h);
    w += 2 * pad; h += 2 * pad;
    if (bg) image_draw_rect(im, x, y, x + w - 1, y + h - 1, w > h ? w : h, bg);   // thick outline = a fill
    text_draw(im, x + pad, y + pad, utf8, px, fg, 0);
    if (bw) *bw = w;
    if (bh) *bh = h;
}
