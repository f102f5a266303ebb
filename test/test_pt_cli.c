// test_pt_cli.c: the commands take the real trainers' checkpoints of ../shared/fixtures/pt/real (yolov9's
// best.pt with EMA and optimizer state, Ultralytics' best.pt): val, detect, export and weights= training
// run on them at 64 px on four coco128 images, and export's hints name the config that fits the file.
// Runs ./yolotrain from the repository root.
#include "test.h"


#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

static char out[1 << 16];
static char real[4200], data[4300], tmp[4200];

// Run `./yolotrain ARGS` with stderr joined to stdout; the exit status, output in out.
static int yt(const char *fmt, ...) {
    char args[16000], cmd[16100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "./yolotrain %s", args);
    return test_shell(cmd, out, sizeof out);
}

// The real files' folder and a data.yaml of coco128's first four images; 0 when all is there.
static int setup(void) {
    const char *sh = shared_dir();
    if (!sh || access("./yolotrain", X_OK)) return -1;
    snprintf(real, sizeof real, "%s/fixtures/pt/real", sh);
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/ultralytics_yolo26n_train_best.pt", real);
    if (access(probe, R_OK)) return -1;
    if (data[0]) return 0;
    char shared[4096], cmd[20000];
    if (!realpath(sh, shared)) return -1;
    snprintf(tmp, sizeof tmp, "%s", test_tmpdir("pt-cli"));
    snprintf(cmd, sizeof cmd,
             "cd %s && mkdir -p d/images/train2017 d/labels/train2017 src && C=$(cd %s/data/coco128 && pwd) && "
             "cp $C/data.yaml d/ && for s in 000000000009 000000000025 000000000030 000000000034; do "
             "ln -s $C/images/train2017/$s.jpg d/images/train2017/ && ln -s $C/images/train2017/$s.jpg src/ && "
             "ln -s $C/labels/train2017/$s.txt d/labels/train2017/; done", tmp, shared);
    if (system(cmd)) return -1;
    snprintf(data, sizeof data, "%s/d/data.yaml", tmp);
    return 0;
}

static void test_val(void) {
    if (setup()) SKIP("./yolotrain, ../shared or its real checkpoints missing");
    int rc = yt("val cfg/gelan-t.ini weights=%s/yolov9_gelan_t_train_best.pt data=%s imgsz=64 batch=4 workers=1 "
                "device=cpu project=%s name=val", real, data, tmp);
    CHECK(rc == 0 && strstr(out, "mAP50"), "exit %d: %s", rc, out);
    rc = yt("val cfg/yolo26n.ini weights=%s/ultralytics_yolo26n_train_best.pt data=%s imgsz=64 batch=4 workers=1 "
            "device=cpu project=%s name=val26", real, data, tmp);
    CHECK(rc == 0 && strstr(out, "mAP50"), "exit %d: %s", rc, out);
}

static void test_detect(void) {
    if (setup()) SKIP("./yolotrain, ../shared or its real checkpoints missing");
    int rc = yt("detect cfg/yolo26n.ini weights=%s/ultralytics_yolo26n_train_best.pt source=%s/src imgsz=64 device=cpu "
                "project=%s name=det", real, tmp, tmp);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = yt("detect cfg/gelan-t.ini weights=%s/yolov9_gelan_t_train_best_striped.pt source=%s/src imgsz=64 device=cpu "
            "project=%s name=det2", real, tmp, tmp);
    CHECK(rc == 0, "exit %d: %s", rc, out);
}

static void test_export(void) {
    if (setup()) SKIP("./yolotrain, ../shared or its real checkpoints missing");
    char onnx[4300];
    snprintf(onnx, sizeof onnx, "%s/best.onnx", tmp);
    int rc = yt("export cfg/gelan-t.ini weights=%s/yolov9_gelan_t_train_best.pt format=onnx imgsz=64 out=%s", real, onnx);
    CHECK(rc == 0 && !access(onnx, R_OK), "exit %d: %s", rc, out);
    // outside a run folder, export names the config that fits the file, not one that does not
    rc = yt("export weights=%s/ultralytics_yolo26n_train_best.pt", real);
    CHECK(rc == 2 && strstr(out, "yolotrain export cfg/yolo26n.ini weights=") && strstr(out, "format=onnx"),
          "exit %d: %s", rc, out);
    rc = yt("export weights=%s/yolov9_gelan_t_train_best.pt", real);
    CHECK(rc == 2 && strstr(out, "yolotrain export cfg/gelan-t.ini weights="), "exit %d: %s", rc, out);
    // a config that does not fit: the message says which one does
    snprintf(onnx, sizeof onnx, "%s/other.onnx", tmp);     // a new name: export replaces no file
    rc = yt("export cfg/yolov9-s.ini weights=%s/ultralytics_yolo26n_train_best.pt format=onnx out=%s", real, onnx);
    CHECK(rc == 2 && strstr(out, "cfg/yolo26n.ini"), "exit %d: %s", rc, out);
}

static void test_train_from(void) {
    if (setup()) SKIP("./yolotrain, ../shared or its real checkpoints missing");
    int rc = yt("cfg/gelan-t.ini weights=%s/yolov9_gelan_t_train_best.pt data=%s imgsz=64 batch=4 epochs=1 workers=1 "
                "device=cpu project=%s name=ft noplots=1", real, data, tmp);
    CHECK(rc == 0 && strstr(out, "Transferred 1339/1339 items"), "exit %d: %s", rc, out);
    rc = yt("cfg/yolo26n.ini weights=%s/ultralytics_yolo26n_train_best.pt data=%s imgsz=64 batch=4 epochs=1 workers=1 "
            "device=cpu project=%s name=ft26 noplots=1", real, data, tmp);
    CHECK(rc == 0 && strstr(out, "Transferred"), "exit %d: %s", rc, out);
}

int main(void) {
    RUN(test_val);
    RUN(test_detect);
    RUN(test_export);
    RUN(test_train_from);
    return test_summary();
}
