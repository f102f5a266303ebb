// test_switches.c: the YT_* registry (core/base/switches.h): a complete table, values read once and again on
// switches_reload, `yolotrain switches` and --version listing them, and test/switch_check.sh (every YT_ name
// of the source in the table). Runs from the repository root, as make test does.
#include "test.h"


static char out[1 << 17];

// Run `ENV ./yolotrain ARGS` with stderr joined to stdout; the exit status, output in out.
static int run(const char *cmdline) { return test_shell(cmdline, out, sizeof out); }

// Every row filled, names unique and YT_, variants and test hooks pinned by a test.
static void test_table(void) {
    int kinds[SWITCH_N_KINDS] = { 0 };
    for (int s = 0; s < SW_COUNT; s++) {
        const SwitchInfo *i = switch_info((Switch)s);
        CHECK(i->name && !strncmp(i->name, "YT_", 3), "row %d has no YT_ name", s);
        if (!i->name) continue;
        CHECK((unsigned)i->kind < SWITCH_N_KINDS, "%s: kind %d", i->name, (int)i->kind);
        CHECK(i->unset && i->unset[0] && i->selects && i->selects[0], "%s: no default or no meaning", i->name);
        CHECK(i->test && (i->test[0] || i->kind == SWITCH_DIAGNOSTIC || i->kind == SWITCH_USER),
              "%s (%s) names no test that pins it", i->name, switch_kind_name(i->kind));
        for (int t = 0; t < s; t++)
            CHECK(strcmp(switch_info((Switch)t)->name, i->name), "%s is listed twice", i->name);
        if ((unsigned)i->kind < SWITCH_N_KINDS) kinds[i->kind]++;
    }
    for (int k = 0; k < SWITCH_N_KINDS; k++) CHECK(kinds[k] > 0, "no %s in the table", switch_kind_name(k));
}

// A value is what the environment held at the first read: a later setenv changes nothing until
// switches_reload (which test_switch does).
static void test_read_once_and_reload(void) {
    unsetenv("YT_FUSE");
    switches_reload();
    CHECK(switch_str(SW_FUSE) == NULL && !switch_is(SW_FUSE, "0"), "YT_FUSE unset reads %s", switch_str(SW_FUSE));
    setenv("YT_FUSE", "0", 1);
    CHECK(switch_str(SW_FUSE) == NULL, "a setenv reached the registry without a reload");
    switches_reload();
    CHECK(switch_is(SW_FUSE, "0") && !switch_is(SW_FUSE, "1"), "after the reload YT_FUSE reads %s", switch_str(SW_FUSE));
    test_switch(SW_FUSE, "1");
    CHECK(switch_is(SW_FUSE, "1"), "test_switch: YT_FUSE reads %s", switch_str(SW_FUSE));
    test_switch(SW_FUSE, NULL);
    CHECK(switch_str(SW_FUSE) == NULL && !getenv("YT_FUSE"), "test_switch(NULL) left YT_FUSE set");
}

// `yolotrain switches` lists every variable, with a value set in its environment; --version names the mode.
static void test_listed_by_the_binary(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    int rc = run("env -u YT_FUSE YT_PDL=0 ./yolotrain switches");
    CHECK(rc == 0, "yolotrain switches: exit %d: %s", rc, out);
    for (int s = 0; s < SW_COUNT; s++) {
        const SwitchInfo *i = switch_info((Switch)s);
        CHECK(strstr(out, i->name), "yolotrain switches does not list %s", i->name);
        if (i->test[0]) CHECK(strstr(out, i->test), "yolotrain switches does not name %s's tests (%s)", i->name, i->test);
    }
    char set[64], unset[64];
    snprintf(set, sizeof set, "  %-20s = 0 (default: ", "YT_PDL");
    snprintf(unset, sizeof unset, "  %-20s unset (default: ", "YT_FUSE");
    CHECK(strstr(out, set), "YT_PDL=0 is not shown as set:\n%s", out);
    CHECK(strstr(out, unset), "YT_FUSE is not shown as unset:\n%s", out);
    CHECK(strstr(out, "variants:") && strstr(out, "diagnostics:") && strstr(out, "test hooks:") &&
          strstr(out, "user settings:"), "the kinds are not headed:\n%s", out);
    rc = run("./yolotrain switches extra");
    CHECK(rc == 2 && strstr(out, "takes no arguments"), "yolotrain switches extra: exit %d: %s", rc, out);
    rc = run("./yolotrain switches --help");
    CHECK(rc == 0 && strstr(out, "yolotrain switches:") && !strstr(out, "keys ("), "switches --help: exit %d: %s", rc, out);
    rc = run("env YT_PDL=0 ./yolotrain --version");
    char want[128];
    snprintf(want, sizeof want, "switches: %d YT_* environment variables", SW_COUNT);
    CHECK(rc == 0 && strstr(out, want) && strstr(out, "yolotrain switches"), "--version: exit %d: %s", rc, out);
    rc = run("./yolotrain --help");
    CHECK(rc == 0 && strstr(out, "yolotrain switches"), "the usage lacks the switches mode: %s", out);
}

// A YT_ variable the table lacks is said at start: a retired one with what replaced it, a typo as changing
// nothing; the registered ones say nothing.
static void test_unknown_names_said(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "env YT_PDL=1 YT_%s=64 YT_%s=0 ./yolotrain --version", "VAL_CACHE_MB", "FUSEE");
    int rc = run(cmd);
    CHECK(rc == 0, "--version: exit %d: %s", rc, out);
    CHECK(strstr(out, "is no longer read: set the key val_cache_mb="), "the retired variable is not said:\n%s", out);
    CHECK(strstr(out, "FUSEE is not a yolotrain switch and changes nothing"), "the typo is not said:\n%s", out);
    CHECK(!strstr(out, "YT_PDL is"), "a registered variable is reported:\n%s", out);
}

// Every YT_ name of the source is in the registry, each variant and test hook with a test
// (test/switch_check.sh, which make layers runs too).
static void test_source_names(void) {
    if (access("test/switch_check.sh", R_OK) || access("core/base/switches.c", R_OK)) SKIP("not run from the repository root");
    int rc = run("bash test/switch_check.sh");
    CHECK(rc == 0, "test/switch_check.sh: exit %d:\n%s", rc, out);
}

int main(void) {
    RUN(test_table);
    RUN(test_read_once_and_reload);
    RUN(test_listed_by_the_binary);
    RUN(test_unknown_names_said);
    RUN(test_source_names);
    return test_summary();
}
