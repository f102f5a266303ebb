// synth_run.h: the small synthetic dataset the training-run tests share (test_resume, test_tfevents,
// test_train_options): n_train + 4 val images of 64-96 px in test_tmpdir(name)/synth, and a project
// folder beside it for the runs. Legend: data_yaml, project: paths the tests pass as overrides.
#pragma once
#include <stdio.h>

#include "io/synth.h"
#include "test/test.h"

static char data_yaml[4300], project[4300];

// 0, or -1 with the reason printed
static int synth_run_data(const char *name, int n_train) {
    const char *dir = test_tmpdir(name);
    char sd[4200];
    snprintf(sd, sizeof sd, "%s/synth", dir);
    snprintf(data_yaml, sizeof data_yaml, "%s/data.yaml", sd);
    snprintf(project, sizeof project, "%s/runs", dir);
    SynthConfig sc = synth_defaults();
    sc.n_train = n_train; sc.n_val = 4; sc.min_side = 64; sc.max_side = 96; sc.threads = 1;
    Err err;
    if (synth_generate(sd, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    return 0;
}
