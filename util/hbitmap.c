/*
 * HBitmap: a sparse bitmap with a granularity (see hbitmap.h).
 *
 * The bits live in a radix tree of fan-out 64 over leaves of 4096 bits.
 * Every slot of the tree is in one of three states: NULL (every bit below
 * is clear), HB_FULL (every bit below is set) or a pointer to a node or
 * leaf that holds both kinds.  A subtree that becomes uniform is freed and
 * its slot becomes NULL or HB_FULL again, so the tree only holds the
 * leaves and nodes that straddle a boundary between set and clear bits:
 * its memory follows the number of runs of set bits, not the size, and
 * setting or clearing a range costs the depth of the tree times the two
 * edges of the range.  Each node keeps two masks over its slots (not NULL,
 * HB_FULL) and the number of set bits below it, so searches for the next
 * set or clear bit and counts over a range descend without scanning.
 *
 * The tree covers a power-of-64 multiple of the leaf size; bits past the
 * bitmap's end are always clear, so a subtree that holds the end is never
 * HB_FULL.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "util/hbitmap.h"

#include <string.h>

#define BITS_PER_WORD   64
#define WORD_SHIFT      6
#define WORD_MASK       (BITS_PER_WORD - 1)

/* A leaf: 64 words of 64 bits. */
#define LEAF_WORDS      64
#define LEAF_SHIFT      12
#define LEAF_BITS       (UINT64_C(1) << LEAF_SHIFT)

/* A node: 64 slots. */
#define NODE_SLOTS      64
#define NODE_SHIFT      6

/* Returned by the internal searches when there is no such bit. */
#define NO_BIT          UINT64_MAX

typedef struct HBLeaf {
    uint64_t words[LEAF_WORDS];
    uint64_t nonzero;           /* bit i: words[i] != 0 */
    uint64_t full;              /* bit i: words[i] == ~0 */
    uint32_t count;             /* set bits */
} HBLeaf;

typedef struct HBNode {
    void *slots[NODE_SLOTS];    /* NULL, HB_FULL, HBNode * or HBLeaf * */
    uint64_t nonnull;           /* bit i: slots[i] != NULL */
    uint64_t full;              /* bit i: slots[i] == HB_FULL */
    uint64_t count;             /* set bits below */
} HBNode;

/* The slot value of a subtree whose bits are all set. */
static char hb_full_marker;
#define HB_FULL ((void *)&hb_full_marker)

struct HBitmap {
    uint64_t size;              /* items */
    int granularity;            /* each bit covers 1 << granularity items */
    uint64_t nbits;             /* bits (granules) */
    uint64_t count;             /* set bits */
    int height;                 /* of the root: 0 is a leaf */
    void *root;
    size_t memory;              /* bytes of nodes and leaves */
    uint64_t *visits;           /* -> visit_count: counted in searches too */
    uint64_t visit_count;
};

/* log2 of the bits below a slot at height @h. */
static inline unsigned span_shift(int h)
{
    return LEAF_SHIFT + NODE_SHIFT * h;
}

/* Is the subtree at height @h based at @base wholly inside [first, last]?
 * (A span of 2^64 bits or more never is: the bitmap has fewer.) */
static inline bool covers(int h, uint64_t base, uint64_t first,
                          uint64_t last)
{
    unsigned sh = span_shift(h);

    return sh < 64 && first <= base &&
           last - base >= (UINT64_C(1) << sh) - 1;
}

/* Bits (@bit % 64)..63 of a word. */
static inline uint64_t mask_from(uint64_t bit)
{
    return ~UINT64_C(0) << (bit & WORD_MASK);
}

/* Bits 0..(@bit % 64) of a word. */
static inline uint64_t mask_to(uint64_t bit)
{
    return ~UINT64_C(0) >> (WORD_MASK - (bit & WORD_MASK));
}

static inline uint64_t bit_of(unsigned i)
{
    return UINT64_C(1) << i;
}

static inline void visit(const HBitmap *hb)
{
    (*hb->visits)++;
}

/* Set bits in a slot at height @h that is NULL or HB_FULL. */
static uint64_t uniform_count(void *slot, int h)
{
    return slot == HB_FULL ? UINT64_C(1) << span_shift(h) : 0;
}

static uint64_t slot_count(void *slot, int h)
{
    if (slot == NULL || slot == HB_FULL) {
        return uniform_count(slot, h);
    }
    return h == 0 ? ((HBLeaf *)slot)->count : ((HBNode *)slot)->count;
}

static void free_slot(HBitmap *hb, void *slot, int h)
{
    if (slot == NULL || slot == HB_FULL) {
        return;
    }
    if (h > 0) {
        HBNode *n = slot;
        uint64_t m;

        for (m = n->nonnull & ~n->full; m; m &= m - 1) {
            free_slot(hb, n->slots[__builtin_ctzll(m)], h - 1);
        }
        hb->memory -= sizeof(HBNode);
    } else {
        hb->memory -= sizeof(HBLeaf);
    }
    g_free(slot);
}

/* A node or leaf at height @h with every bit clear (@slot NULL) or set
 * (@slot HB_FULL), to be changed in part. */
static void *expand(HBitmap *hb, void *slot, int h)
{
    bool full = slot == HB_FULL;

    if (h == 0) {
        HBLeaf *l = g_new(HBLeaf, 1);

        memset(l->words, full ? 0xff : 0, sizeof(l->words));
        l->nonzero = l->full = full ? ~UINT64_C(0) : 0;
        l->count = full ? LEAF_BITS : 0;
        hb->memory += sizeof(HBLeaf);
        return l;
    } else {
        HBNode *n = g_new(HBNode, 1);
        unsigned i;

        for (i = 0; i < NODE_SLOTS; i++) {
            n->slots[i] = slot;
        }
        n->nonnull = n->full = full ? ~UINT64_C(0) : 0;
        n->count = uniform_count(slot, h);
        hb->memory += sizeof(HBNode);
        return n;
    }
}

/* Replace *@slot by NULL or HB_FULL if its subtree became uniform. */
static void collapse(HBitmap *hb, void **slot, int h)
{
    uint64_t c = slot_count(*slot, h);

    if (*slot == NULL || *slot == HB_FULL) {
        return;
    }
    if (c == 0) {
        free_slot(hb, *slot, h);
        *slot = NULL;
    } else if (span_shift(h) < 64 && c == UINT64_C(1) << span_shift(h)) {
        free_slot(hb, *slot, h);
        *slot = HB_FULL;
    }
}

/* Refresh @n's masks for slot @i. */
static void node_note(HBNode *n, unsigned i)
{
    n->nonnull &= ~bit_of(i);
    n->full &= ~bit_of(i);
    if (n->slots[i]) {
        n->nonnull |= bit_of(i);
    }
    if (n->slots[i] == HB_FULL) {
        n->full |= bit_of(i);
    }
}

/*
 * Set (@value) or clear bits [@first, @last] in the subtree at *@slot,
 * height @h, based at bit @base (the range is within it).  Returns how
 * many bits changed.
 */
static uint64_t change(HBitmap *hb, void **slot, int h, uint64_t base,
                       uint64_t first, uint64_t last, bool value)
{
    void *uniform = value ? HB_FULL : NULL;
    uint64_t changed = 0;

    visit(hb);
    if (*slot == uniform) {
        return 0;
    }
    if (covers(h, base, first, last)) {
        changed = value ? (UINT64_C(1) << span_shift(h)) -
                          slot_count(*slot, h)
                        : slot_count(*slot, h);
        free_slot(hb, *slot, h);
        *slot = uniform;
        return changed;
    }
    if (*slot == NULL || *slot == HB_FULL) {
        *slot = expand(hb, *slot, h);
    }

    if (h == 0) {
        HBLeaf *l = *slot;
        uint64_t fw = (first - base) >> WORD_SHIFT;
        uint64_t lw = (last - base) >> WORD_SHIFT;
        uint64_t i;

        for (i = fw; i <= lw; i++) {
            uint64_t mask = ~UINT64_C(0);
            uint64_t old = l->words[i];

            if (i == fw) {
                mask &= mask_from(first);
            }
            if (i == lw) {
                mask &= mask_to(last);
            }
            l->words[i] = value ? old | mask : old & ~mask;
            changed += __builtin_popcountll(l->words[i] ^ old);
            l->nonzero = (l->nonzero & ~bit_of(i)) |
                         ((uint64_t)(l->words[i] != 0) << i);
            l->full = (l->full & ~bit_of(i)) |
                      ((uint64_t)(l->words[i] == ~UINT64_C(0)) << i);
        }
        l->count = value ? l->count + changed : l->count - changed;
    } else {
        HBNode *n = *slot;
        unsigned cs = span_shift(h - 1);
        uint64_t fi = (first - base) >> cs;
        uint64_t li = (last - base) >> cs;
        uint64_t i;

        for (i = fi; i <= li; i++) {
            uint64_t cbase = base + (i << cs);
            uint64_t cend = cbase + ((UINT64_C(1) << cs) - 1);

            changed += change(hb, &n->slots[i], h - 1, cbase,
                              MAX(first, cbase), MIN(last, cend), value);
            node_note(n, i);
        }
        n->count = value ? n->count + changed : n->count - changed;
    }
    collapse(hb, slot, h);
    return changed;
}

/* First bit >= @from that is set (@value) or clear in the subtree at
 * @slot, height @h, based at @base (@from inside it); NO_BIT if none. */
static uint64_t find(const HBitmap *hb, void *slot, int h, uint64_t base,
                     uint64_t from, bool value)
{
    visit(hb);
    if (slot == NULL || slot == HB_FULL) {
        return (slot == HB_FULL) == value ? from : NO_BIT;
    }
    if (h == 0) {
        const HBLeaf *l = slot;
        uint64_t wi = (from - base) >> WORD_SHIFT;
        uint64_t w = value ? l->words[wi] : ~l->words[wi];
        uint64_t cand;

        w &= mask_from(from);
        if (w) {
            return base + (wi << WORD_SHIFT) + __builtin_ctzll(w);
        }
        /* Later words that hold such a bit. */
        cand = (value ? l->nonzero : ~l->full) & ~mask_to(wi);
        if (wi == LEAF_WORDS - 1 || !cand) {
            return NO_BIT;
        }
        wi = __builtin_ctzll(cand);
        w = value ? l->words[wi] : ~l->words[wi];
        return base + (wi << WORD_SHIFT) + __builtin_ctzll(w);
    } else {
        const HBNode *n = slot;
        unsigned cs = span_shift(h - 1);
        unsigned i = (from - base) >> cs;
        uint64_t r, cand;

        r = find(hb, n->slots[i], h - 1, base + ((uint64_t)i << cs), from,
                 value);
        if (r != NO_BIT) {
            return r;
        }
        /* Any later slot that is not uniformly the other value has one. */
        cand = (value ? n->nonnull : ~n->full) & ~mask_to(i);
        if (i == NODE_SLOTS - 1 || !cand) {
            return NO_BIT;
        }
        i = __builtin_ctzll(cand);
        return find(hb, n->slots[i], h - 1, base + ((uint64_t)i << cs),
                    base + ((uint64_t)i << cs), value);
    }
}

/* Set bits within [@first, @last] in the subtree at @slot (height @h,
 * based at @base; the range intersects it). */
static uint64_t count_range(const HBitmap *hb, void *slot, int h,
                            uint64_t base, uint64_t first, uint64_t last)
{
    uint64_t lo = MAX(first, base);
    uint64_t hi = span_shift(h) < 64
                  ? MIN(last, base + ((UINT64_C(1) << span_shift(h)) - 1))
                  : last;
    uint64_t sum = 0;

    visit(hb);
    if (slot == NULL || slot == HB_FULL) {
        return slot == HB_FULL ? hi - lo + 1 : 0;
    }
    if (covers(h, base, first, last)) {
        return slot_count(slot, h);
    }
    if (h == 0) {
        const HBLeaf *l = slot;
        uint64_t fw = (lo - base) >> WORD_SHIFT;
        uint64_t lw = (hi - base) >> WORD_SHIFT;
        uint64_t m = l->nonzero & ~(fw ? mask_to(fw - 1) : 0) &
                     mask_to(lw);

        for (; m; m &= m - 1) {
            unsigned i = __builtin_ctzll(m);
            uint64_t w = l->words[i];

            if (i == fw) {
                w &= mask_from(lo);
            }
            if (i == lw) {
                w &= mask_to(hi);
            }
            sum += __builtin_popcountll(w);
        }
    } else {
        const HBNode *n = slot;
        unsigned cs = span_shift(h - 1);
        unsigned fi = (lo - base) >> cs;
        unsigned li = (hi - base) >> cs;
        uint64_t m = n->nonnull & ~(fi ? mask_to(fi - 1) : 0) & mask_to(li);

        for (; m; m &= m - 1) {
            unsigned i = __builtin_ctzll(m);

            sum += count_range(hb, n->slots[i], h - 1,
                               base + ((uint64_t)i << cs), lo, hi);
        }
    }
    return sum;
}

HBitmap *hbitmap_new(uint64_t size, int granularity)
{
    HBitmap *hb;

    g_assert(granularity >= 0 && granularity < 64);
    g_assert(size <= INT64_MAX);

    hb = g_new0(HBitmap, 1);
    hb->size = size;
    hb->granularity = granularity;
    hb->nbits = (size >> granularity) +
                ((size & ((UINT64_C(1) << granularity) - 1)) != 0);
    while (span_shift(hb->height) < 64 &&
           (UINT64_C(1) << span_shift(hb->height)) < hb->nbits) {
        hb->height++;
    }
    hb->visits = &hb->visit_count;
    return hb;
}

void hbitmap_free(HBitmap *hb)
{
    if (!hb) {
        return;
    }
    free_slot(hb, hb->root, hb->height);
    g_free(hb);
}

uint64_t hbitmap_size(const HBitmap *hb)
{
    return hb->size;
}

int hbitmap_granularity(const HBitmap *hb)
{
    return hb->granularity;
}

size_t hbitmap_memory(const HBitmap *hb)
{
    return sizeof(HBitmap) + hb->memory;
}

uint64_t hbitmap_visits(const HBitmap *hb)
{
    return hb->visit_count;
}

static void change_bits(HBitmap *hb, uint64_t first, uint64_t last,
                        bool value)
{
    uint64_t n = change(hb, &hb->root, hb->height, 0, first, last, value);

    if (value) {
        hb->count += n;
    } else {
        g_assert(hb->count >= n);
        hb->count -= n;
    }
}

/*
 * Clip [@start, @start + @count) to the bitmap and convert it to granules
 * [*@first, *@last].  Returns false if nothing is left.
 */
static bool range_to_bits(const HBitmap *hb, uint64_t start, uint64_t count,
                          uint64_t *first, uint64_t *last)
{
    uint64_t end;

    if (count == 0 || start >= hb->size) {
        return false;
    }
    end = count > hb->size - start ? hb->size : start + count;
    *first = start >> hb->granularity;
    *last = (end - 1) >> hb->granularity;
    return true;
}

void hbitmap_set(HBitmap *hb, uint64_t start, uint64_t count)
{
    uint64_t first, last;

    if (range_to_bits(hb, start, count, &first, &last)) {
        change_bits(hb, first, last, true);
    }
}

void hbitmap_reset(HBitmap *hb, uint64_t start, uint64_t count)
{
    uint64_t first, last;

    if (range_to_bits(hb, start, count, &first, &last)) {
        change_bits(hb, first, last, false);
    }
}

void hbitmap_set_all(HBitmap *hb)
{
    if (hb->nbits) {
        change_bits(hb, 0, hb->nbits - 1, true);
    }
}

void hbitmap_reset_all(HBitmap *hb)
{
    free_slot(hb, hb->root, hb->height);
    hb->root = NULL;
    hb->count = 0;
}

static bool bit_is_set(const HBitmap *hb, uint64_t bit)
{
    void *slot = hb->root;
    int h = hb->height;

    visit(hb);
    while (slot != NULL && slot != HB_FULL) {
        if (h == 0) {
            const HBLeaf *l = slot;
            uint64_t off = bit & (LEAF_BITS - 1);

            return (l->words[off >> WORD_SHIFT] >> (off & WORD_MASK)) & 1;
        }
        h--;
        slot = ((HBNode *)slot)->slots[(bit >> span_shift(h)) &
                                       (NODE_SLOTS - 1)];
    }
    return slot == HB_FULL;
}

bool hbitmap_get(const HBitmap *hb, uint64_t item)
{
    g_assert(item < hb->size);
    return bit_is_set(hb, item >> hb->granularity);
}

uint64_t hbitmap_count(const HBitmap *hb)
{
    uint64_t items = hb->count << hb->granularity;

    /* The last granule may stick out past the end of the bitmap. */
    if (hb->count && bit_is_set(hb, hb->nbits - 1)) {
        items -= (hb->nbits << hb->granularity) - hb->size;
    }
    return items;
}

bool hbitmap_is_empty(const HBitmap *hb)
{
    return hb->count == 0;
}

/* The first bit in [@first, @last] that is set (@value) or clear, or
 * NO_BIT. */
static uint64_t find_in(const HBitmap *hb, uint64_t first, uint64_t last,
                        bool value)
{
    uint64_t bit = find(hb, hb->root, hb->height, 0, first, value);

    return bit <= last && bit < hb->nbits ? bit : NO_BIT;
}

int64_t hbitmap_next_dirty(const HBitmap *hb, uint64_t start, uint64_t count)
{
    uint64_t first, last, bit;

    if (!range_to_bits(hb, start, count, &first, &last)) {
        return -1;
    }
    bit = find_in(hb, first, last, true);
    if (bit == NO_BIT) {
        return -1;
    }
    return bit == first ? (int64_t)start : (int64_t)(bit << hb->granularity);
}

int64_t hbitmap_next_zero(const HBitmap *hb, uint64_t start, uint64_t count)
{
    uint64_t first, last, bit;

    if (!range_to_bits(hb, start, count, &first, &last)) {
        return -1;
    }
    bit = find_in(hb, first, last, false);
    if (bit == NO_BIT) {
        return -1;
    }
    return bit == first ? (int64_t)start : (int64_t)(bit << hb->granularity);
}

bool hbitmap_next_dirty_area(const HBitmap *hb, uint64_t start, uint64_t end,
                             uint64_t max_count, uint64_t *area_start,
                             uint64_t *area_count)
{
    int64_t dirty, clean;
    uint64_t limit;

    end = MIN(end, hb->size);
    if (start >= end) {
        return false;
    }
    dirty = hbitmap_next_dirty(hb, start, end - start);
    if (dirty < 0) {
        return false;
    }
    limit = end;
    if (max_count && max_count < end - (uint64_t)dirty) {
        limit = dirty + max_count;
    }
    clean = hbitmap_next_zero(hb, dirty, limit - dirty);
    *area_start = dirty;
    *area_count = (clean < 0 ? limit : (uint64_t)clean) - dirty;
    return true;
}

uint64_t hbitmap_count_between(const HBitmap *hb, uint64_t start,
                               uint64_t count)
{
    uint64_t first, last, end, bits, items;

    if (!range_to_bits(hb, start, count, &first, &last)) {
        return 0;
    }
    bits = count_range(hb, hb->root, hb->height, 0, first, last);

    /* Whole granules, minus the parts of the edge granules outside. */
    items = bits << hb->granularity;
    end = count > hb->size - start ? hb->size : start + count;
    if (bit_is_set(hb, first)) {
        items -= start - (first << hb->granularity);
    }
    if (bit_is_set(hb, last)) {
        items -= ((last + 1) << hb->granularity) - end;
    }
    return items;
}

void hbitmap_merge(HBitmap *dst, const HBitmap *src)
{
    uint64_t bit = 0;

    g_assert(dst->size == src->size);
    g_assert(dst->granularity == src->granularity);

    /* Run by run: the cost follows the runs of @src, not its size. */
    while (bit < src->nbits) {
        uint64_t first = find_in(src, bit, src->nbits - 1, true);
        uint64_t end;

        if (first == NO_BIT) {
            break;
        }
        end = find_in(src, first, src->nbits - 1, false);
        if (end == NO_BIT) {
            end = src->nbits;
        }
        change_bits(dst, first, end - 1, true);
        bit = end;
    }
}
