// fuzz_config.c: libFuzzer target for config_load. The input is NUL-separated parts: the INI text,
// a hyp yaml (when not empty, loaded through a leading hyp=FILE override), then up to 6 command-line
// overrides. A config that loads must print as INI that loads back to the same printout, and its
// [data] section must parse or fail cleanly in dataspec_read. Build and run: run.sh.
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfg/config.h"
#include "io/dataset.h"

#define MAX_OVERRIDES 6

static char dir[4096], ini[4200], hyp[4200], again[4200];
static Config cfg, cfg2;                // 0.25 MB each: kept out of the stack

static void dir_remove(void) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void dir_make(void) {            // one scratch folder per process, removed at exit
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fuzz_config-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) { perror(dir); abort(); }
    atexit(dir_remove);
    snprintf(ini, sizeof ini, "%s/c.ini", dir);
    snprintf(hyp, sizeof hyp, "%s/hyp.yaml", dir);
    snprintf(again, sizeof again, "%s/again.ini", dir);
}

static void put(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) { perror(path); abort(); }
}

static char *printed(const Config *c) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    config_print(c, f);
    fclose(f);
    return text;
}

// 1 when a printed value cannot be written so that it reads back, a known limit (cfg/parts.h): it
// holds both quote characters and a " #" that quoting should protect, or a " ;", where inih always
// cuts a value, quoted or not.
static int unprintable(const char *text) {
    for (const char *line = text; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        size_t n = strcspn(line, "\n");
        if (memchr(line, '\'', n) && memchr(line, '"', n)) return 1;
        for (size_t i = 1; i < n; i++)
            if (line[i] == ';' && isspace((unsigned char)line[i - 1])) return 1;
    }
    return 0;
}

// config_print's output reads back to a config that prints the same (config.h's promise).
static void check_round_trip(void) {
    char *first = printed(&cfg);
    if (unprintable(first)) { free(first); return; }
    put(again, first, strlen(first));
    Err err;
    if (config_load(again, 0, NULL, &cfg2, &err) != 0) {
        fprintf(stderr, "printed config does not load: %s\n%s", err.msg, first);
        abort();
    }
    char *second = printed(&cfg2);
    if (strcmp(strchr(first, '\n'), strchr(second, '\n'))) {   // line 1 names the file read
        fprintf(stderr, "printed config changed on reload:\n%s\n--- reloaded:\n%s", first, second);
        abort();
    }
    free(first);
    free(second);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) dir_make();
    char *text = malloc(size + 1), *parts[2 + MAX_OVERRIDES], *argv[1 + MAX_OVERRIDES];
    memcpy(text, data, size);
    text[size] = 0;
    int n_parts = 0;
    for (char *p = text; p <= text + size && n_parts < 2 + MAX_OVERRIDES; p += strlen(p) + 1)
        parts[n_parts++] = p;
    put(ini, parts[0], strlen(parts[0]));
    int argc = 0;
    char hyp_arg[4300];
    if (n_parts > 1 && parts[1][0]) {
        put(hyp, parts[1], strlen(parts[1]));
        snprintf(hyp_arg, sizeof hyp_arg, "hyp=%s", hyp);
        argv[argc++] = hyp_arg;
    }
    for (int i = 2; i < n_parts; i++) argv[argc++] = parts[i];
    Err err;
    if (config_load(ini, argc, argv, &cfg, &err) == 0) {
        char buf[CFG_PATH + 32];
        const Where *w = config_where(&cfg, "train.batch");
        if (!w) abort();
        config_where_text(w, buf, sizeof buf);
        // hyp= reloads its yaml over the printed [hyp] values, which command-line keys had beaten
        if (!cfg.hyp_file[0]) check_round_trip();
        DataSpec d;
        if (!cfg.data[0] && cfg.n_data_kv > 0 && dataspec_read(NULL, &cfg, &d, &err) == 0) dataspec_free(&d);
    }
    free(text);
    return 0;
}
