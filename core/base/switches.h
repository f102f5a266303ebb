// switches.h: the one registry of yolotrain's YT_* environment variables (issue 35): each one's kind, default,
// what it selects and the test that pins it, read from the environment once, at the first ask, and listed by
// `yolotrain switches`. Nothing else in core/, gpu/, io/ or cfg/ calls getenv for a YT_ name
// (test/switch_check.sh, run by make layers, holds the table to the names the source uses).
#pragma once
#include <stdio.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SWITCH_VARIANT,      // an A/B variant of a fast path, kept to measure it; a test compares the two
    SWITCH_DIAGNOSTIC,   // prints or stops something to look at; changes no result
    SWITCH_TEST_HOOK,    // reaches a failure path or a machine the tests have not (a stand-in)
    SWITCH_USER,         // a user's setting
    SWITCH_N_KINDS
} SwitchKind;

// One name per YT_ variable, in the table's order (core/base/switches.c); a misspelt one does not compile.
typedef enum {
    // variants
    SW_FUSE, SW_CONV_STATS, SW_GRAD_FRESH, SW_GRAD_ALIAS, SW_GRAD_BF16, SW_WEIGHTS_ONCE, SW_PDL, SW_GRAPHS, SW_NCCL_OVERLAP,
    SW_DRAW_SYNC, SW_CUDNN_TUNE, SW_GROUPED_DENSE,
    // diagnostics
    SW_CUDNN_VERBOSE, SW_PDL_REPORT, SW_GPU_HANG_AT, SW_PROFILE, SW_VERBOSE, SW_KEEP_TMP,
    // test hooks
    SW_STOP_AFTER_STEPS, SW_SIGNAL_AT, SW_FAIL_CUDA, SW_NAN_AT_STEP, SW_FAIL_DEVICE, SW_DISK_FREE_MB, SW_GPU_CC,
    SW_GPU_RESERVE_GB, SW_TEST_SAME_GPU, SW_ONNX_RUNTIME, SW_MEM_AVAILABLE_MB,
    // user settings
    SW_FONT, SW_CONV, SW_NCCL, SW_NCCL_TIMEOUT, SW_NVJPEG, SW_CUDNN_ENGINES, SW_SHARED,
    SW_COUNT
} Switch;

typedef struct {
    const char *name;      // "YT_FUSE"
    SwitchKind  kind;
    const char *unset;     // what the program does with the variable unset: its default
    const char *selects;   // the values and what each selects
    const char *test;      // the tests that pin it ("" for none: only a diagnostic or a user setting)
} SwitchInfo;

const SwitchInfo *switch_info(Switch s);
const char *switch_kind_name(SwitchKind k);

// The variable's value as read (NULL: unset). Valid until switches_reload().
const char *switch_str(Switch s);
// 1 when the variable is set to exactly `value`
int switch_is(Switch s, const char *value);

// Reads every variable again: for a test that set one in its own environment (setenv, putenv) before
// running what reads it in this process. Not while another thread may read a switch.
void switches_reload(void);

// One line on f for each YT_ variable of the environment that is not in the table: a retired one names
// what replaced it, any other (a typo) says it changes nothing. yolotrain calls it once at start.
void switches_warn_unknown(FILE *f);

// `yolotrain switches`: the table, with each variable's value in this environment.
void switches_print(FILE *f);

#ifdef __cplusplus
}
#endif
