/* costlearn's ranker in C (costlearn/ranker/_native.h lists its files): the
 * shortlist table (costlearn/model/shortlist.py). Its query (rank_table,
 * called by costlearn_rank) and its lists at the grid points
 * (costlearn_shortlist_build; the twin:
 * costlearn.ranker.shortlist_build.build_lists_numpy). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "_native.h"

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))           /* a compiler without it: the same answers, fetched on use */
#endif

/* Rank the candidates with the shortlist table (costlearn/model/shortlist.py,
 * the twin Shortlist.rank): the query's cell of the grid (step tab_step in
 * log2 of each extent), the lists of its 8 corners (up to tab_width entries,
 * -1 ends one) restricted to the candidates selected, each with the residual
 * (full score - score of the first tab_trees trees) of the nearest corner
 * that lists it (ties: the lower corner number); score = the first
 * tab_trees trees' score here + that residual. Returns the number ranked, or
 * -1 when the table does not answer (outside the grid, no candidate fits:
 * level 2, or fewer listed than min(top, selected)). */
int32_t rank_table(int64_t m, int64_t n, int64_t k, const double x[3], int32_t rows, int32_t top,
                          costlearn_ctx *ctx)
{
    if (ctx->tab_index == NULL || ctx->level == 2)
        return -1;
    int64_t i0[3];
    double f[3];
    for (int j = 0; j < 3; ++j) {
        f[j] = x[j] / ctx->tab_step;
        i0[j] = (int64_t)floor(f[j]);
        if (i0[j] < 0 || i0[j] + 1 >= ctx->tab_n[j])
            return -1;
    }
    const int32_t n_cands = ctx->n_cands, width = ctx->tab_width;
    for (int corner = 0; corner < 8; corner += 2) {    /* the 8 corners' lists, fetched together: a query's
                                                          cells lie apart in a table of megabytes */
        const int64_t point = ((i0[0] + (corner >> 2 & 1)) * ctx->tab_n[1] + i0[1] + (corner >> 1 & 1))
                              * ctx->tab_n[2] + i0[2];
        PREFETCH(ctx->tab_index + point * width);
        PREFETCH(ctx->tab_index + (point + 2) * width - 1);
        PREFETCH(ctx->tab_resid + point * width);
        PREFETCH(ctx->tab_resid + (point + 2) * width - 1);
    }
    uint8_t *sel = ctx->mask;                          /* selected candidates, then: listed */
    memset(sel, 0, (size_t)n_cands);
    for (int32_t r = 0; r < rows; ++r)
        sel[ctx->row_cand[r]] = 1;
    double *seen = ctx->seen, *resid = ctx->resid;
    int32_t listed = 0;
    for (int corner = 0; corner < 8; ++corner) {
        const int64_t a = i0[0] + (corner >> 2 & 1), b = i0[1] + (corner >> 1 & 1), c = i0[2] + (corner & 1);
        const double da = f[0] - (double)a, db = f[1] - (double)b, dc = f[2] - (double)c;
        const double d2 = da * da + db * db + dc * dc;
        const int64_t point = (a * ctx->tab_n[1] + b) * ctx->tab_n[2] + c;
        const int16_t *idx = ctx->tab_index + point * width;
        const float *res = ctx->tab_resid + point * width;
        for (int32_t e = 0; e < width && idx[e] >= 0; ++e) {
            const int32_t cand = idx[e];
            if (cand >= n_cands || !sel[cand])
                continue;
            if (sel[cand] == 1) { sel[cand] = 2; ++listed; seen[cand] = d2; resid[cand] = (double)res[e]; }
            else if (d2 < seen[cand]) { seen[cand] = d2; resid[cand] = (double)res[e]; }
        }
    }
    const int64_t need = top < rows ? top : rows;
    if (listed < need)
        return -1;
    int32_t *row_cand = ctx->row_cand;
    int32_t kept = 0;
    for (int32_t c = 0; c < n_cands; ++c) {           /* branch-free, as in select_candidates */
        row_cand[kept] = c;
        kept += sel[c] == 2;
    }
    const double *lin = feature_rows(m, n, k, kept, ctx);
    partial_scores(kept, ctx->tab_trees, lin, ctx);
    costlearn_scored *work = ctx->work;
    for (int32_t r = 0; r < kept; ++r) {
        work[r].index = r;
        work[r].score = ctx->acc[r] + resid[row_cand[r]];
    }
    select_sorted(work, kept, kept);
    for (int32_t r = 0; r < kept; ++r) {
        ctx->out_index[r] = row_cand[work[r].index];
        ctx->out_score[r] = work[r].score;
    }
    return kept;
}

/* The shortlist table's lists at the grid points shapes[0..n_points) (m, n, k
 * each; the twin: costlearn.ranker.shortlist_build.build_lists_numpy): per point, where
 * some candidate fits (the candidate rule at level 0 or 1), the `tiles` best tile configs by
 * the cascaded full scores (mode 1) and the vendor candidate, each with its
 * residual (full score - score of the first ctx->tab_trees trees); -1 ends a
 * shorter list (every entry -1 where none fits: level 2).
 * out_index, out_resid: [n_points x width], width = tiles + (vendor >= 0).
 * Returns 0, or -1 on a bad argument. */
int32_t costlearn_shortlist_build(const int64_t *shapes, int32_t n_points, int32_t tiles, int32_t width,
                                  costlearn_ctx *ctx, int16_t *out_index, float *out_resid)
{
    if (tiles < 1 || width != tiles + (ctx->vendor >= 0) || ctx->n_cands > 32767)
        return -1;
    const int32_t vendor = ctx->vendor;
    for (int32_t p = 0; p < n_points; ++p) {
        int16_t *idx = out_index + (int64_t)p * width;
        float *res = out_resid + (int64_t)p * width;
        for (int32_t e = 0; e < width; ++e) { idx[e] = -1; res[e] = 0.0f; }
        const int64_t m = shapes[3 * p], n = shapes[3 * p + 1], k = shapes[3 * p + 2];
        const int32_t got = costlearn_rank(m, n, k, NULL, tiles + (vendor >= 0), 1, ctx);
        if (ctx->level == 2 || got <= 0)
            continue;
        /* the list: the best tiles in rank order, then the vendor; their full scores */
        int32_t *row_cand = ctx->row_cand;
        double *full = ctx->seen;                      /* scratch: full score per list entry */
        int32_t len = 0, vendor_at = -1;
        for (int32_t r = 0; r < got && len < tiles; ++r) {
            const int32_t c = ctx->out_index[r];
            if (c == vendor) { vendor_at = r; continue; }
            idx[len] = (int16_t)c;
            full[len++] = ctx->out_score[r];
        }
        if (vendor >= 0) {
            if (vendor_at < 0) {                       /* not among the survivors: score it alone, every tree */
                uint8_t *only = ctx->mask;
                memset(only, 0, (size_t)ctx->n_cands);
                only[vendor] = 1;
                costlearn_rank(m, n, k, only, 1, 0, ctx);
                full[len] = ctx->out_score[0];
                ctx->level = 0;
            } else {
                full[len] = ctx->out_score[vendor_at];
            }
            idx[len++] = (int16_t)vendor;
        }
        for (int32_t e = 0; e < len; ++e)
            row_cand[e] = idx[e];
        const double *lin = feature_rows(m, n, k, len, ctx);
        partial_scores(len, ctx->tab_trees, lin, ctx);
        for (int32_t e = 0; e < len; ++e)
            res[e] = (float)(full[e] - ctx->acc[e]);
    }
    return 0;
}
