// test_export_replace.c: `yolotrain export` replaces no file it did not make: a user's my.ini beside
// out=my.safetensors (the config export writes there), an existing out= file and an existing ONNX
// out= are refused with status 2 and a message naming the file, and stay byte for byte; into fresh
// names the export writes both files. The model: yolov9-t (a DualDDetect head), 3 classes.
#include "test/test.h"

#include <fcntl.h>
#include <unistd.h>

#include "cfg/config.h"
#include "core/eval/export.h"
#include "core/spec/model.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

static char dir[4096], weights[4300];

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) { printf("cannot write %s\n", path); exit(1); }
    fclose(f);
}

static int same_text(const char *path, const char *text) {
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    return !strcmp(buf, text);
}

// yolotrain export cfg/yolov9-t.ini weights=W out=OUT nc=3 [format=onnx]; stderr into msg
static int export(const char *out, int onnx, char *msg, size_t n) {
    static Config cfg;
    char w[4400], o[4400], log[4200];
    snprintf(w, sizeof w, "weights=%s", weights);
    snprintf(o, sizeof o, "out=%s", out);
    char *argv[] = { "cfg/yolov9-t.ini", w, o, "nc=3", "imgsz=64", "format=onnx" };
    snprintf(log, sizeof log, "%s/stderr.txt", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    int rc = export_run(onnx ? 6 : 5, argv, &cfg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved), close(fd);
    FILE *f = fopen(log, "r");
    size_t len = f ? fread(msg, 1, n - 1, f) : 0;
    if (f) fclose(f);
    msg[len] = 0;
    return rc;
}

static int setup(void) {
    static Config cfg;
    Err err = { { 0 } };
    Model m;
    char *ov[] = { "nc=3", "imgsz=64" };
    snprintf(dir, sizeof dir, "%s", test_tmpdir("export-replace"));
    snprintf(weights, sizeof weights, "%s/w.safetensors", dir);
    if (config_load("cfg/yolov9-t.ini", 2, ov, &cfg, &err) || model_build(&cfg, 1, 64, &m, &err)) {
        printf("    %s\n", err.msg);
        return -1;
    }
    model_init_weights(&m, 5);
    int rc = model_save(&m, weights, &err);
    if (rc) printf("    %s\n", err.msg);
    model_free(&m);
    return rc;
}

static void test_user_files_stay(void) {
    if (setup()) { CHECK(0, "no model"); return; }
    char out[4300], ini[4300], msg[4096];
    snprintf(out, sizeof out, "%s/my.safetensors", dir);
    snprintf(ini, sizeof ini, "%s/my.ini", dir);
    put(ini, "# my own config\n");
    int rc = export(out, 0, msg, sizeof msg);
    CHECK(rc == 2 && strstr(msg, ini), "my.ini beside out=: status %d, %s", rc, msg);
    CHECK(same_text(ini, "# my own config\n"), "the user's my.ini was replaced");
    CHECK(access(out, F_OK) != 0, "out= written though the export was refused");

    remove(ini);
    put(out, "my own weights\n");
    rc = export(out, 0, msg, sizeof msg);
    CHECK(rc == 2 && strstr(msg, out), "an existing out=: status %d, %s", rc, msg);
    CHECK(same_text(out, "my own weights\n"), "the user's out= file was replaced");

    snprintf(out, sizeof out, "%s/my.onnx", dir);
    put(out, "my own onnx\n");
    rc = export(out, 1, msg, sizeof msg);
    CHECK(rc == 2 && strstr(msg, out), "an existing ONNX out=: status %d, %s", rc, msg);
    CHECK(same_text(out, "my own onnx\n"), "the user's ONNX file was replaced");
}

static void test_fresh_names_written(void) {
    if (setup()) { CHECK(0, "no model"); return; }
    char out[4300], ini[4300], msg[4096];
    snprintf(out, sizeof out, "%s/fresh.safetensors", dir);
    snprintf(ini, sizeof ini, "%s/fresh.ini", dir);
    int rc = export(out, 0, msg, sizeof msg);
    CHECK(rc == 0, "export into fresh names: status %d, %s", rc, msg);
    CHECK(access(out, F_OK) == 0 && access(ini, F_OK) == 0, "the weights and their config are written");
}

int main(void) {
    RUN(test_user_files_stay);
    RUN(test_fresh_names_written);
    return test_summary();
}
