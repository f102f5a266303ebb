// outdir.c: see outdir.h.
#include "core/train/outdir.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

int outdir_make(const Config *cfg, const char *base, int labels, char *dir, size_t size, Err *err) {
    const Where *w = config_where(cfg, "project");
    const char *project = w && !strcmp(w->file, "command line") ? cfg->project : base;
    struct stat st;
    int k = 1;
    for (; k < 10000; k++) {
        if (k == 1) snprintf(dir, size, "%s/%s", project, cfg->name);
        else snprintf(dir, size, "%s/%s%d", project, cfg->name, k);
        if (cfg->exist_ok || stat(dir, &st)) break;
    }
    if (k == 10000)
        return err_set(err, "%s/%s: no free folder name up to %s9999; pick another name= or set exist_ok=1", project,
                       cfg->name, cfg->name);
    char p[3 * CFG_PATH];
    snprintf(p, sizeof p, labels ? "%s/labels" : "%s", dir);
    if (make_dirs(p)) return err_set(err, "cannot create %s: %s; set project= to a writable folder", p, strerror(errno));
    return 0;
}
