// main.c: the command line. `yolotrain CONFIG [overrides]` trains; other modes are words first.
#include <stdio.h>
#include <string.h>

#include "core/util.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: yolotrain CONFIG.ini [key=value | --key value ...]   train\n"
        "       yolotrain info CONFIG.ini [overrides]                  layer table, parameters, FLOPs\n"
        "       yolotrain check CONFIG.ini | data=FILE.yaml            validate a dataset\n"
        "       yolotrain synth [overrides]                            (re)generate the built-in dataset\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    fprintf(stderr, "yolotrain: '%s': not implemented yet\n", argv[1]);
    return 2;
}
