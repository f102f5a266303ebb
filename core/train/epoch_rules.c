// epoch_rules.c: see epoch_rules.h.
#include "core/train/epoch_rules.h"

int epoch_is_best(double fitness, double best_fitness, int best_epoch) {
    return best_epoch < 0 || fitness >= best_fitness;
}

int epoch_patience_stops(int epoch, int best_epoch, int patience) {
    return patience > 0 && epoch - best_epoch >= patience;
}

int epoch_mosaic_close_at(int epochs, int close_mosaic) {
    int at = epochs - close_mosaic;
    return close_mosaic > 0 && at >= 0 ? at : -1;
}

int epoch_mosaic_on(int epoch, int epochs, int close_mosaic) {
    int at = epoch_mosaic_close_at(epochs, close_mosaic);
    return at < 0 || epoch < at;
}

int epoch_period_save(int epoch, int save_period) {
    return save_period > 0 && epoch % save_period == 0;
}
