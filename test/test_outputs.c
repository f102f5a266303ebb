// test_outputs.c: where `yolotrain val` and `yolotrain detect` put their results, and what detect
// reads (issue 33 item 4, issue 36). Both name their folder by one rule (core/train/outdir.h): under
// runs/val or runs/detect unless project= is on the command line, name= then name2, name3 when taken,
// name itself with exist_ok=1, and a last line "Results saved to DIR". A .txt list given to detect as
// source= resolves its entries as a data.yaml split list does (relative to the list's folder, "./"
// dropped, blanks trimmed, blank lines skipped), from any current directory. gelan-t at 64 px with
// random weights over 3 synthetic val images, on the CPU.
#include "test/test.h"

#include <fcntl.h>
#include <limits.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

#include "core/eval/detect.h"
#include "core/eval/val.h"
#include "io/dataset.h"
#include "io/synth.h"

enum { P = 4096 };

static char dir[P], ini[P], ini_project[P + 32], data_arg[P + 8], weights_arg[P + 16];
static const char *use_ini = ini;                 // the config run_mode loads

// The synthetic set and gelan-t weights in a scratch folder; cfg/t.ini by its absolute path, so that
// the tests may change the current directory.
static int make_data(void) {
    snprintf(dir, sizeof dir, "%s", test_tmpdir("outputs"));
    snprintf(data_arg, sizeof data_arg, "data=%s/data.yaml", dir);
    snprintf(weights_arg, sizeof weights_arg, "weights=%s/w.safetensors", dir);
    if (!realpath("cfg/t.ini", ini)) { printf("    cfg/t.ini: run from the checkout\n"); return -1; }
    size_t n;                                     // cfg/t.ini with project = DIR/ini_runs
    char *text = slurp(ini, &n), *at = text ? strstr(text, "project = runs/train\n") : NULL;
    snprintf(ini_project, sizeof ini_project, "%s/project.ini", dir);
    FILE *f = at ? fopen(ini_project, "w") : NULL;
    if (f) fprintf(f, "%.*sproject = %s/ini_runs\n%s", (int)(at - text), text, dir, at + strlen("project = runs/train\n"));
    free(text);
    if (!f || fclose(f)) { printf("    cannot write %s\n", ini_project); return -1; }
    SynthConfig sc = synth_defaults();
    sc.n_train = 1; sc.n_val = 3; sc.min_side = 64; sc.max_side = 96; sc.threads = 1;
    Err err;
    if (synth_generate(dir, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    Config *cfg = calloc(1, sizeof *cfg);
    char *argv[] = { "imgsz=64", weights_arg };
    Model m;
    int rc = config_load(ini, 2, argv, cfg, &err);
    if (!rc) config_set_nc(cfg, SYNTH_NC);
    if (!rc) rc = model_build(cfg, 1, 64, &m, &err);
    if (!rc) {
        model_init_weights(&m, 7);
        rc = model_save(&m, cfg->weights, &err);
        model_free(&m);
    }
    if (rc) printf("    %s\n", err.msg);
    free(cfg);
    return rc;
}

static int ready(void) { return dir[0] || !make_data(); }

// `yolotrain MODE` (val or detect) with the command-line keys extra (NULL-ended) in the current
// directory; stdout and stderr go to out. Returns the exit status.
static int run_mode(const char *mode, const char *const *extra, char *out, size_t size) {
    char *argv[16] = { "imgsz=64", "batch=2", "workers=1", "device=cpu", "conf=0.001", data_arg, weights_arg };
    int argc = 7;
    for (int i = 0; extra[i] && argc < 16; i++) argv[argc++] = (char *)extra[i];
    Config *cfg = calloc(1, sizeof *cfg);
    DetectOptions o;
    Err err;
    int rc = 2;
    int detect = !strcmp(mode, "detect");
    if ((!detect || !detect_take_args(&argc, argv, &o, &err)) && !config_load(use_ini, argc, argv, cfg, &err)) {
        char path[P + 32];
        snprintf(path, sizeof path, "%s/stdout.txt", dir);
        fflush(stdout); fflush(stderr);
        int saved = dup(1), saved2 = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1); dup2(fd, 2);
        close(fd);
        rc = detect ? detect_run(cfg, &o) : val_run(cfg);
        fflush(stdout); fflush(stderr);
        dup2(saved, 1); dup2(saved2, 2);
        close(saved); close(saved2);
        size_t n;
        char *text = slurp(path, &n);
        snprintf(out, size, "%s", text ? text : "");
        free(text);
    } else {
        snprintf(out, size, "%s", err.msg);
    }
    free(cfg);
    return rc;
}

static int is_dir(const char *p) {
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}

// The last line names the folder: "Results saved to DIR" then the end of the line or " (" or ";".
static int saved_to(const char *out, const char *folder) {
    char want[P];
    snprintf(want, sizeof want, "Results saved to %s", folder);
    const char *p = strstr(out, want);
    if (!p) return 0;
    char next = p[strlen(want)];
    return next == '\n' || next == ' ' || next == ';';
}

// The same naming steps for one mode, run in a fresh current directory: the default folder twice
// (exp, exp2), name=, exist_ok=1, project= on the command line (twice), and an INI project, which
// names where training runs go and so moves neither command's results.
static void naming_rules(const char *mode) {
    char cwd[P], here[P], out[1 << 15], base[64], got[P + 64];
    if (!getcwd(cwd, sizeof cwd)) { CHECK(0, "getcwd"); return; }
    snprintf(here, sizeof here, "%s/%s-cwd", dir, mode);
    mkdir(here, 0755);
    if (chdir(here)) { CHECK(0, "chdir %s", here); return; }
    snprintf(base, sizeof base, "runs/%s", mode);
    char source[P + 16], project[P + 16];
    snprintf(source, sizeof source, "source=%s/images/val", dir);
    snprintf(project, sizeof project, "project=%s/mine-%s", dir, mode);
    const char *src = !strcmp(mode, "detect") ? source : "save_txt=1";
    const char *plain[] = { src, NULL }, *named[] = { src, "name=foo", NULL }, *reuse[] = { src, "exist_ok=1", NULL };
    const char *proj[] = { src, project, NULL };
    for (int k = 1; k <= 2; k++) {
        CHECK(run_mode(mode, plain, out, sizeof out) == 0, "%s run %d: %s", mode, k, out);
        snprintf(got, sizeof got, k == 1 ? "%s/exp" : "%s/exp%d", base, k);
        CHECK(is_dir(got) && saved_to(out, got), "%s run %d: want %s: %s", mode, k, got, out);
    }
    CHECK(run_mode(mode, named, out, sizeof out) == 0, "%s name=foo: %s", mode, out);
    snprintf(got, sizeof got, "%s/foo", base);
    CHECK(is_dir(got) && saved_to(out, got), "%s name=foo: want %s: %s", mode, got, out);
    CHECK(run_mode(mode, reuse, out, sizeof out) == 0, "%s exist_ok=1: %s", mode, out);
    char exp[P + 64];
    snprintf(exp, sizeof exp, "%s/exp", base);
    snprintf(got, sizeof got, "%s/exp3", base);
    CHECK(!is_dir(got) && saved_to(out, exp), "%s exist_ok=1: want %s reused: %s", mode, exp, out);
    for (int k = 1; k <= 2; k++) {
        CHECK(run_mode(mode, proj, out, sizeof out) == 0, "%s project=: %s", mode, out);
        snprintf(got, sizeof got, k == 1 ? "%s/mine-%s/exp" : "%s/mine-%s/exp%d", dir, mode, k);
        CHECK(is_dir(got) && saved_to(out, got), "%s project= run %d: want %s: %s", mode, k, got, out);
    }
    use_ini = ini_project;
    CHECK(run_mode(mode, plain, out, sizeof out) == 0, "%s with the INI's project: %s", mode, out);
    use_ini = ini;
    snprintf(got, sizeof got, "%s/exp3", base);
    snprintf(project, sizeof project, "%s/ini_runs", dir);
    CHECK(is_dir(got) && saved_to(out, got) && !is_dir(project), "%s with the INI's project: want %s: %s", mode, got, out);
    if (chdir(cwd)) CHECK(0, "chdir back to %s", cwd);
}

static void test_val_names_as_detect(void) {
    if (!ready()) { CHECK(0, "no data"); return; }
    naming_rules("val");
    char out[1 << 15], project[P + 16], png[P + 64];   // noplots=1 (train.py's --noplots): no plots
    snprintf(project, sizeof project, "project=%s/noplots", dir);
    const char *extra[] = { project, "noplots=1", NULL };
    CHECK(run_mode("val", extra, out, sizeof out) == 0, "noplots=1: %s", out);
    snprintf(png, sizeof png, "%s/noplots/exp/confusion_matrix.png", dir);
    CHECK(access(png, F_OK) != 0 && !strstr(out, ".png"), "noplots=1 drew %s: %s", png, out);
    snprintf(png, sizeof png, "%s/mine-val/exp/confusion_matrix.png", dir);
    CHECK(access(png, F_OK) == 0, "no %s without noplots", png);
}

static void test_detect_names(void) {
    if (!ready()) { CHECK(0, "no data"); return; }
    naming_rules("detect");
}

// A list of the three val images, written as users write them (a byte-order mark, "./", blanks, a
// blank line, CRLF), given to detect from a current directory that is not the list's folder: every
// entry is found, and detect reads the same files a data.yaml whose val split is that list names.
static void test_detect_list_file(void) {
    if (!ready()) { CHECK(0, "no data"); return; }
    char lists[P + 16], list[P + 32], yaml[P + 32], cwd[P], here[P + 16], out[1 << 15];
    snprintf(lists, sizeof lists, "%s/lists", dir);
    mkdir(lists, 0755);
    snprintf(list, sizeof list, "%s/val.txt", lists);
    FILE *f = fopen(list, "w");
    if (f) fprintf(f, "\xEF\xBB\xBF../images/val/000000.jpg\r\n\r\n  ./../images/val/000001.jpg \t\n"
                      "%s/images/val/000002.jpg\n", dir);
    if (!f || fclose(f)) { CHECK(0, "cannot write %s", list); return; }
    snprintf(yaml, sizeof yaml, "%s/list.yaml", lists);
    f = fopen(yaml, "w");
    if (f) fprintf(f, "train: val.txt\nval: val.txt\nnc: %d\n", SYNTH_NC);
    if (!f || fclose(f)) { CHECK(0, "cannot write %s", yaml); return; }
    Config *cfg = calloc(1, sizeof *cfg);
    Dataset ds;
    Err err;
    DatasetOptions opt = { .quiet = 1, .report = stderr };
    int rc = dataset_open(yaml, cfg, "val", &opt, &ds, &err);
    free(cfg);
    CHECK(rc == 0 && ds.n == 3, "the list as a data.yaml split: %s", rc ? err.msg : "");
    if (rc) return;
    snprintf(here, sizeof here, "%s/list-cwd", dir);
    mkdir(here, 0755);
    if (!getcwd(cwd, sizeof cwd) || chdir(here)) { CHECK(0, "chdir %s", here); dataset_free(&ds); return; }
    char source[P + 48];
    snprintf(source, sizeof source, "source=%s", list);
    const char *extra[] = { source, NULL };
    rc = run_mode("detect", extra, out, sizeof out);
    if (chdir(cwd)) CHECK(0, "chdir back to %s", cwd);
    CHECK(rc == 0 && strstr(out, "(3 images)") && !strstr(out, "failed"), "detect source=%s: %s", list, out);
    for (int i = 0; i < ds.n; i++) {
        char want[P + 64];
        snprintf(want, sizeof want, " %s: ", ds.s[i].image);
        CHECK(strstr(out, want), "detect did not read %s as the data.yaml list does: %s", ds.s[i].image, out);
    }
    dataset_free(&ds);
}

int main(void) {
    RUN(test_val_names_as_detect);
    RUN(test_detect_names);
    RUN(test_detect_list_file);
    return test_summary();
}
