/* flashjit tune's flags. Each value is checked here for form (a list of
 * known names or integers in range); what a backend supports is checked
 * once the backend is known (tune_space_validate). Every message names the
 * flag and the value it rejects. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_grid.h"
#include "tune.h"
#include "tune/target.h"

_Static_assert(FJ_MAX_HEAD_DIM == 576, "--head-dims' message says 1..576");

#define CMD "tune"

static const char usage_text[] =
    "usage: flashjit tune [--grid NAME] [--backend cuda|cpu] [--head-dims LIST]\n"
    "         [--dtypes LIST] [--causal LIST] [--seqlens LIST] [--decode]\n"
    "         [--decode-seqlen-k N] [--batch-heads N] [--configs LIST]\n"
    "         [--write | --output FILE] [--force] [--repeat N] [--warmup N]\n"
    "         [--jobs N] [--time-limit SECONDS] [--max-spread PCT] [--verbose]\n"
    "\n"
    "Times every candidate configuration on each problem and reports the\n"
    "fastest; with --write (or --output FILE) appends it to the tuning file,\n"
    "which plans then use (docs/tuning.md); without either nothing is written.\n"
    "Each candidate is first checked against the CPU reference on a small problem of\n"
    "the problem's head dim, dtype and mask; a wrong one is rejected and fails\n"
    "the run. Entries are appended (fsync'd) as problems finish, so a stopped run\n"
    "resumes: points the output file already has for this device are skipped.\n"
    "Problems are printed as problem keys (b4.hq16.hkv16.sq4096.sk4096.d128.bf16.nomask),\n"
    "entries keyed by their tuning point (d128.bf16.nomask.sk4096).\n"
    "\n"
    "problems (without --grid or an axis flag: the backend's default grid):\n"
    "  --grid NAME          the rows of tools/grids/NAME.txt, or of a file (a path\n"
    "                       with a '/'), one problem key per line. 'default': CUDA\n"
    "                       the anchors' prefill rows (head dims 64,128; bf16,f16;\n"
    "                       causal none,bottom-right; S 1024,4096,16384; B*S = 16384,\n"
    "                       H = 2048/D: 24 points), CPU default-cpu.txt (64,128;\n"
    "                       f32; none,bottom-right; S 512,2048; b1 h8: 8 points)\n"
    "  --decode             adds the decode bucket (one query row) of each head\n"
    "                       dim, dtype and mask\n"
    "  --decode-seqlen-k N  its keys (default 8192 on CUDA, 4096 on the CPU)\n"
    "axes (each replaces that axis of the default grid; not with another grid):\n"
    "  --head-dims LIST     e.g. 64,128 (1..576; CUDA: multiples of 8 in 8..256)\n"
    "  --dtypes LIST        bf16,f16 (CUDA) or f32,f16,bf16 (CPU)\n"
    "  --causal LIST        none,bottom-right,top-left (the causal ones share an\n"
    "                       entry)\n"
    "  --seqlens LIST       seqlen_q = seqlen_k of each point; 1: the decode bucket\n"
    "  --batch-heads N      batch x heads of every point (default CUDA: B*S = 16384,\n"
    "                       H = 2048/D as in the anchors, decode 8 x 32; CPU: 8,\n"
    "                       decode 32)\n"
    "candidates:\n"
    "  --configs LIST       instead of the backend's: CUDA\n"
    "                       m{64,128}n{32,64,128}w{4,8}s{2,3}; decode tiles\n"
    "                       m16n32w1s{2,3,4}, m16n64w1s{2,3}, m32n32w2s{2,3},\n"
    "                       m32n64w2s2 and (warps sharing the keys) m16n64w2s1,\n"
    "                       m16n128w4s1; flash_wgmma (sm_90) m128n64g2s{2,3},\n"
    "                       m128n128g2s{2,3}, m192n{64,128}g3s3, m64n128g1s3; CPU\n"
    "                       q{64,128,256,512}k{128,256,512,1024}\n"
    "measuring:\n"
    "  --backend cuda|cpu   (default: what a default context picks:\n"
    "                       FLASHJIT_BACKEND, else CUDA when usable, else CPU)\n"
    "  --repeat N           timed runs per candidate, median kept (CUDA 25, CPU 5)\n"
    "  --warmup N           untimed runs first (CUDA 5, CPU 1)\n"
    "  --jobs N             threads compiling CUDA candidates (default: the cores)\n"
    "  --time-limit S       seconds one problem's checks and timing may take;\n"
    "                       candidates left then are not timed (default: no limit)\n"
    "  --verbose            also print each candidate's check error and timings\n"
    "  --max-spread PCT     warn when the best's runs spread more than PCT % of\n"
    "                       their median ((max - min) / median; default 50)\n"
    "output (without --write or --output: a report only, nothing written):\n"
    "  --write              append to the default tuning file: FLASHJIT_TUNING_FILE,\n"
    "                       else tuning.txt in the cache directory (the file every\n"
    "                       program's default context reads)\n"
    "  --output FILE        append to FILE instead\n"
    "  --force              re-tune points already in the file (the new entry wins)\n"
    "\n"
    "Exit status: 0 when every point got an entry; 1 when a candidate gave wrong\n"
    "results, a point could not be tuned or the file could not be written; 2 for\n"
    "bad flags.\n";

/* ---- lists ------------------------------------------------------------------ */

typedef bool (*item_fn)(const char *token, tune_space *s);

/* Calls item for each comma-separated token of val; prints
 * "--flag: 'token' <expect>" for the first one it rejects. */
static bool each_item(const char *flag, const char *val, const char *expect, const char *example,
                      item_fn item, tune_space *s)
{
    char buf[1024];
    if (!val || !*val) {
        cli_usage_error(CMD, "%s needs a comma-separated list, e.g. %s %s", flag, flag, example);
        return false;
    }
    if (strlen(val) >= sizeof buf) {
        cli_usage_error(CMD, "%s: the list is longer than %zu characters", flag, sizeof buf - 1);
        return false;
    }
    strcpy(buf, val);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), n++)
        if (!item(t, s)) {
            cli_usage_error(CMD, "%s: '%s' %s", flag, t, expect);
            return false;
        }
    if (!n) cli_usage_error(CMD, "%s: '%s' holds no value: %s", flag, val, expect);
    return n > 0;
}

static bool parse_int(const char *t, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(t, &end, 10);
    if (errno || end == t || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

/* Appends v to list (count n, capacity cap) unless it is there already. */
static bool add_int(int *list, int *n, int cap, int v)
{
    for (int i = 0; i < *n; i++)
        if (list[i] == v) return true;
    if (*n == cap) return false;
    list[(*n)++] = v;
    return true;
}

static bool head_dim_item(const char *t, tune_space *s)
{
    int d;
    return parse_int(t, 1, FJ_MAX_HEAD_DIM, &d) &&
           add_int(s->head_dims, &s->n_head_dims, TUNE_MAX_VALUES, d);
}

static bool seqlen_item(const char *t, tune_space *s)
{
    int n;
    return parse_int(t, 1, 1 << 20, &n) && add_int(s->seqlens, &s->n_seqlens, TUNE_MAX_VALUES, n);
}

static bool dtype_item(const char *t, tune_space *s)
{
    static const fj_dtype all[] = {FJ_F32, FJ_F16, FJ_BF16};
    for (int i = 0; i < 3; i++)
        if (!strcmp(t, fj_dtype_name(all[i]))) {
            for (int j = 0; j < s->n_dtypes; j++)
                if (s->dtypes[j] == all[i]) return true;
            s->dtypes[s->n_dtypes++] = all[i];
            return true;
        }
    return false;
}

static bool causal_item(const char *t, tune_space *s)
{
    static const fj_causal all[] = {FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT, FJ_CAUSAL_TOP_LEFT};
    for (int i = 0; i < 3; i++)
        if (!strcmp(t, fj_causal_name(all[i]))) {
            for (int j = 0; j < s->n_causals; j++)
                if (s->causals[j] == all[i]) return true;
            s->causals[s->n_causals++] = all[i];
            return true;
        }
    return false;
}

/* Form only (letters and digits, fits the tuning file's field); whether the
 * backend can parse it is tune_space_validate's. */
static bool config_item(const char *t, tune_space *s)
{
    size_t len = strlen(t);
    if (len >= TUNE_CONFIG_LEN) return false;
    for (size_t i = 0; i < len; i++)
        if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9'))) return false;
    for (int i = 0; i < s->n_configs; i++)
        if (!strcmp(s->configs[i], t)) return true;
    if (s->n_configs == TUNE_MAX_CONFIGS) return false;
    strcpy(s->configs[s->n_configs++], t);
    return true;
}

/* ---- the flags ------------------------------------------------------------------ */

static const struct list_flag {
    const char *flag;
    item_fn item;
    const char *expect, *example;
} list_flags[] = {
    {"--head-dims", head_dim_item, "is not a head dim in 1..576", "64,128"},
    {"--dtypes", dtype_item, "is not one of f32, f16, bf16", "bf16,f16"},
    {"--causal", causal_item, "is not one of none, bottom-right, top-left", "none,bottom-right"},
    {"--seqlens", seqlen_item, "is not a sequence length in 1..1048576 (1: decode)",
     "1024,4096,16384"},
    {"--configs", config_item,
     "is not a configuration such as m128n64w4s2 (CUDA) or q256k512 (CPU), or is past the "
     "64th",
     "m128n64w4s2,m64n64w4s2"},
};

static const struct int_flag {
    const char *flag;
    size_t offset;
    int lo, hi;
} int_flags[] = {
    {"--repeat", offsetof(tune_options, repeat), 1, 100000},
    {"--warmup", offsetof(tune_options, warmup), 0, 100000},
    {"--jobs", offsetof(tune_options, jobs), 1, 1024},
    {"--batch-heads", offsetof(tune_options, space.batch_heads), 1, 65535},
    {"--decode-seqlen-k", offsetof(tune_options, space.decode_seqlen_k), 1, 1 << 20},
};

/* 1: flag was one of the value flags above (val its value, NULL when none);
 * 0: it is not; 2: a bad value (message printed). */
static int value_flag(const char *a, const char *val, tune_options *o)
{
    for (size_t k = 0; k < sizeof list_flags / sizeof list_flags[0]; k++) {
        if (strcmp(a, list_flags[k].flag)) continue;
        const struct list_flag *f = &list_flags[k];
        return each_item(a, val, f->expect, f->example, f->item, &o->space) ? 1 : 2;
    }
    for (size_t k = 0; k < sizeof int_flags / sizeof int_flags[0]; k++) {
        if (strcmp(a, int_flags[k].flag)) continue;
        int *dst = (int *)((char *)o + int_flags[k].offset);
        return cli_parse_int(CMD, a, val, int_flags[k].lo, int_flags[k].hi, dst) ? 1 : 2;
    }
    return 0;
}

/* 0, or 2 after a message. */
static int word_flag(const char *a, const char *val, tune_options *o)
{
    if (!strcmp(a, "--grid")) {
        if (!val || !*val)
            return cli_usage_error(CMD, "--grid needs a grid name (%s) or a file",
                                   cli_grid_names());
        o->space.grid = val;
    } else if (!strcmp(a, "--time-limit")) {
        char *end;
        double t = val ? strtod(val, &end) : 0;
        if (!val || *end || !(t > 0) || t > 1e7)
            return cli_usage_error(CMD, "--time-limit: '%s' is not a number of seconds > 0",
                                   val ? val : "");
        o->time_limit = t;
    } else if (!strcmp(a, "--backend")) {
        if (!val || (strcmp(val, "cuda") && strcmp(val, "cpu")))
            return cli_usage_error(CMD, "--backend: '%s' is not cuda or cpu", val ? val : "");
        o->backend = !strcmp(val, "cuda") ? FJ_BACKEND_CUDA : FJ_BACKEND_CPU;
    } else if (!strcmp(a, "--max-spread")) {
        char *end;
        double m = val ? strtod(val, &end) : 0;
        if (!val || *end || !(m >= 0) || m > 1e6)
            return cli_usage_error(CMD, "--max-spread: '%s' is not a percentage >= 0",
                                   val ? val : "");
        o->max_spread = m;
    } else if (!strcmp(a, "--output")) {
        if (!val || !*val) return cli_usage_error(CMD, "--output needs a file name");
        o->output = val;
    }
    return 0;
}

enum { OPT_VALUE = 1, OPT_FORCE, OPT_DECODE, OPT_VERBOSE, OPT_WRITE };

int tune_parse_flags(int argc, char **argv, tune_options *o)
{
    memset(o, 0, sizeof *o);
    o->backend = FJ_BACKEND_AUTO;
    o->warmup = -1;
    o->max_spread = TUNE_DEFAULT_MAX_SPREAD;
    /* every value flag by its name (the tables above and word_flag's) */
    static const char *const words[] = {"--grid", "--time-limit", "--backend", "--output",
                                        "--max-spread"};
    cli_option own[CLI_MAX_OPTIONS];
    int n = 0;
    for (size_t k = 0; k < sizeof list_flags / sizeof list_flags[0]; k++)
        own[n++] = (cli_option){list_flags[k].flag + 2, required_argument, OPT_VALUE};
    for (size_t k = 0; k < sizeof int_flags / sizeof int_flags[0]; k++)
        own[n++] = (cli_option){int_flags[k].flag + 2, required_argument, OPT_VALUE};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        own[n++] = (cli_option){words[k] + 2, required_argument, OPT_VALUE};
    own[n++] = (cli_option){"force", no_argument, OPT_FORCE};
    own[n++] = (cli_option){"decode", no_argument, OPT_DECODE};
    own[n++] = (cli_option){"verbose", no_argument, OPT_VERBOSE};
    own[n++] = (cli_option){"write", no_argument, OPT_WRITE};
    own[n] = (cli_option){NULL, 0, 0};
    const cli_option *const tables[] = {own, NULL};
    cli_options p;
    cli_options_begin(&p, CMD, argc, argv, tables);
    const char *val;
    for (int c; (c = cli_next_option(&p, &val)) != -1;) {
        switch (c) {
        case CLI_OPTION_ERROR: return 2;
        case CLI_OPTION_HELP: fputs(usage_text, stdout); return -1;
        case OPT_FORCE: o->force = true; break;
        case OPT_DECODE: o->space.decode = true; break;
        case OPT_VERBOSE: o->verbose = true; break;
        case OPT_WRITE: o->write = true; break;
        default: {
            int r = value_flag(p.flag, val, o);
            if (r == 2) return 2;
            if (!r && word_flag(p.flag, val, o)) return 2;
        }
        }
    }
    if (cli_no_arguments(&p)) return 2;
    if (o->write && o->output)
        return cli_usage_error(CMD, "--write and --output exclude each other (--write: the "
                                    "default tuning file; --output FILE: that file)");
    return 0;
}

/* ---- what the backend takes ------------------------------------------------------ */

int tune_space_validate(const tune_space *s, fj_backend b)
{
    bool cuda = b == FJ_BACKEND_CUDA;
    for (int i = 0; cuda && i < s->n_head_dims; i++)
        if (s->head_dims[i] % 8 || s->head_dims[i] < 8 || s->head_dims[i] > TUNE_CUDA_MAX_HEAD_DIM)
            return cli_usage_error(CMD,
                                   "--head-dims: %d is not a multiple of 8 in 8..%d, which the "
                                   "CUDA kernels need (--backend cpu takes any head dim up to %d)",
                                   s->head_dims[i], TUNE_CUDA_MAX_HEAD_DIM, FJ_MAX_HEAD_DIM);
    for (int i = 0; cuda && i < s->n_dtypes; i++)
        if (s->dtypes[i] == FJ_F32)
            return cli_usage_error(CMD, "--dtypes: the CUDA kernels compute f16 and bf16, not f32 "
                                        "(--backend cpu tunes f32)");
    const fj_backend_tuning *row = fj_backend_tuning_of_kind(b);
    for (int i = 0; i < s->n_configs; i++) {
        int rows, keys;
        if (!row || row->tiles_parse(s->configs[i], &rows, &keys))
            return cli_usage_error(CMD, "--configs: '%s' is not a %s configuration (%s)",
                                   s->configs[i], cuda ? "CUDA" : "CPU",
                                   row ? row->tiles_grammar : "this backend tunes nothing");
    }
    return 0;
}
