// parts.h: what the cfg/ files share among themselves (the key table, layer rows, the hyp yaml).
// Not for use outside cfg/: the public contract is cfg/config.h.
#pragma once
#include "cfg/config.h"

// One configuration key. A single table (cfg/schema.c) of these drives parsing, overrides,
// defaults, printing and config_where; no key has code of its own.
typedef enum { KEY_INT, KEY_BOOL, KEY_DOUBLE, KEY_STRING, KEY_ENUM } KeyType;
typedef struct {
    const char *section, *name;
    KeyType     type;
    size_t      offset, size;         // the field in Config
    double      lo, hi;               // INT, DOUBLE: allowed range
    int         multiple;             // INT: the value must be a multiple of this (imgsz), or 0
    const char *allowed;              // ENUM: words separated by '|' ("" may be one of them)
    int       (*check)(const char *value, char *why, size_t n);   // STRING, DOUBLE: extra rule, or NULL
    const char *def;                  // the default, as text: parsed like a value from a file
    const char *help;                 // one line of meaning (`yolotrain MODE --help`); never empty
} Key;

extern const Key cfg_keys[];
extern const int cfg_n_keys;
extern const char *const cfg_sections[];    // in print order, NULL-terminated

// The key `name` of `section` (section NULL: of any section; names are unique), or NULL.
const Key *key_find(const char *section, const char *name);
// Parse `value` (quotes around it are dropped) into its field and remember `at`. Returns 0, or -1
// with err: "<where>: [section] name = value: problem; allowed".
int  key_set(Config *cfg, const Key *k, const char *value, const Where *at, Err *err);
// A string as an INI value that reads back the same: quoted when empty, padded or holding " #".
// (inih always cuts a value at " ;", quoted or not.)
void text_format(const char *v, char *buf, size_t n);
// The field's value as INI text.
void key_format(const Config *cfg, const Key *k, char *buf, size_t n);
// v as text that reads back to exactly v: a whole number below 2^53 in plain digits (the layer
// lists take integers only; "%g" would write 160 as 1.6e+02), else the shortest "%g" text.
void number_format(double v, char *buf, size_t n);
// "close keys: lr0, lrf" for a misspelt name (section NULL: search all, print section.name).
void key_suggest(const char *section, const char *name, char *buf, size_t n);
// 1 when `section` is one of cfg_sections.
int  section_known(const char *section);
// Copy value without one pair of surrounding quotes ('x' or "x").
void unquote(const char *value, char *out, size_t n);

// Parse one [backbone]/[head] row "<from>, <number>, <module>, [<args>]" numbered `index` and
// append it, checking its structure. Returns 0, or -1 with err naming at.
int  layer_add(Config *cfg, const char *section, const char *index, const char *row,
               const Where *at, Err *err);
// The row as INI text (without "<index> = ").
void layer_format(const LayerSpec *l, char *buf, size_t n);

// Load a hyp.scratch-high.yaml style mapping over the [hyp] keys, skipping keys set on the command
// line. Returns 0, or -1 with err naming the yaml file:line.
int  hyp_yaml_load(Config *cfg, const char *path, Err *err);
