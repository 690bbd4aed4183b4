"""Compiled L1-family kernel sections: Laplacian and Cauchy kernels of rows against landmarks.

Neither kernel is a function of an inner product, so no GEMM forms them. The loops here
are compiled by Numba for the machine they run on and release the GIL, so the pass's
threads run them side by side. They are laid out as a GEMM's kernels are: the landmarks
are copied into panels of two vectors of landmarks (``d x 16`` in float32, ``d x 8`` in
float64; a landmark's value at input feature ``k`` beside the next landmark's), and a
micro tile of :data:`TILE_ROWS` rows by one panel keeps ``TILE_ROWS x 2`` vector
accumulators in registers over the input features: per feature, two vector loads of the
panel, one broadcast per row, and one vector term per accumulator. The micro tile is
written in LLVM's vector types (:func:`_tile_intrinsic`): from loops over arrays, Numba
vectorises over the input features instead (eight lanes of one entry, summed at the
end), and it cannot keep a tile of entries in registers across a loop. The tile's folds
of :data:`FEATURE_BLOCK` input features are added into its entries, and the last fold
turns them into the sections' values while they are in registers. Every panel passes
over a block of rows (:data:`ROW_BLOCK_BYTES`) before the next block is taken. Rows and
landmarks beyond a multiple of the tile repeat the last one, and every lane of a vector
does the same operations in the same order: an entry is a sum over the input features in
their order, fold by fold, whatever row or landmark sits beside it, so a section does not
depend on where its row sits in a chunk or a slice, nor on which other landmarks are
evaluated with it.

Laplacian: ``|x - l|_1 = sum_k (2 max(x_k, l_k) - x_k - l_k)``: one maximum and one
accumulation per term, where a subtraction, an absolute value and an addition take three.
The accumulation is written as a multiply-add by a run-time one, which the compiler
cannot drop: on an AVX2 processor the maximum and the multiply-add then take different
execution ports, where a maximum and an addition compete for the same two. The rounding
error scales with the inputs' magnitudes, ``eps sum_k |x_k| + |l_k|`` times at most the
terms of a fold: the rows are shifted by the data's center before they reach the sections
(:meth:`~dsgd_dask.features.blocks.FeatureBlocks.prepare`).

Cauchy: ``1 / prod_k (1 + (x_k - l_k)^2)`` of inputs scaled by ``1 / sigma``; a product
that overflows is a kernel value below the smallest normal float, and gives 0.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: Rows of a micro tile: with two vectors of landmarks, 10 accumulators, the panel's two
#: vectors, a broadcast row value, a term and the run-time one: 15 of AVX2's 16 vector registers.
TILE_ROWS = 5

#: Bytes of a vector register the micro tile is written for (AVX2's 256 bits): 8 float32 or 4 float64 lanes.
VECTOR_BYTES = 32

#: Input features per fold of a micro tile: its sums (products) of up to this many terms are
#: added to (multiplied into) the entries' running results, so that float32 sums of hundreds
#: of features keep about the rounding error of short ones (784 features: 4e-6 of the
#: exponent against 1.3e-5 in one fold); the folds cost about 4 % (measured).
FEATURE_BLOCK = 256

#: Bytes of the block of rows every panel passes over in turn (330 rows of 784 float32
#: features): small enough to stay in the shared L3 cache beside the other core's block and
#: the sections written, where a slice of 4096 rows (12.5 MiB) did not (measured on two
#: threads: 20-35 % more terms per second than panels taken two at a time over all rows).
ROW_BLOCK_BYTES = 1 << 20

# reassociation vectorises the rows' sums
_FLAGS = {"reassoc", "contract", "nsz"}


def _tile_intrinsic(product: bool):
    """A micro tile's loop over the input features as an intrinsic: Laplacian terms, or Cauchy terms if ``product``."""

    @intrinsic
    def tile(typingctx, rows, panel, d, start, one, out, out_stride, partial, finish, row_sums, panel_sums, scale):
        """Fold the terms of :data:`TILE_ROWS` rows and a panel's landmarks over ``d`` input features.

        ``rows``: the address of :data:`TILE_ROWS` row addresses; ``panel``: the address of
        a ``d x (2 lanes)`` panel; ``start``: the accumulators' first value. Terms:
        ``acc + max(x, y) one`` (Laplacian) or ``acc (1 + (x - y)^2)`` (Cauchy). The results
        go to ``out + (r out_stride + c)`` elements; if ``partial`` is not 0, folded first
        into the results there (a contiguous ``TILE_ROWS x (2 lanes)`` tile: ``partial +
        acc`` or ``partial acc``); if ``finish``, then turned into the section's
        value: the Laplacian exponent ``scale max(2 s - sx_r - sl_c, 0)`` of the sum ``s``
        from the rows' and the panel's sums (the addresses ``row_sums`` and ``panel_sums``),
        or the Cauchy section ``one / p`` of the product ``p``.
        """
        if not isinstance(one, types.Float) or start != one or scale != one:
            return None
        sig = types.void(types.intp, types.intp, types.intp, one, one, types.intp, types.intp, types.intp,
                         types.intp, types.intp, types.intp, one)

        def codegen(context, builder, signature, args):
            rows_, panel_, d_, start_, one_, out_, stride_, partial_, finish_, row_sums_, panel_sums_, scale_ = args
            itemsize = 4 if signature.args[4] == types.float32 else 8
            lanes = VECTOR_BYTES // itemsize
            fty = context.get_value_type(signature.args[4])
            vec = ir.VectorType(fty, lanes)
            i32, i64 = ir.IntType(32), ir.IntType(64)
            fptr, vptr = fty.as_pointer(), vec.as_pointer()
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec, vec, vec]),
                                                 f"llvm.fma.v{lanes}f{8 * itemsize}")
            undef = ir.Constant(vec, ir.Undefined)
            lane0 = ir.Constant(i32, 0)
            splat_mask = ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)

            def splat(value):
                return builder.shuffle_vector(builder.insert_element(undef, value, lane0), undef, splat_mask)

            def element(pointer, index):
                return builder.gep(pointer, [index])

            addresses = builder.inttoptr(rows_, i64.as_pointer())
            row_ptrs = [builder.inttoptr(builder.load(element(addresses, ir.Constant(i64, r))), fptr)
                        for r in range(TILE_ROWS)]
            panel_ptr = builder.inttoptr(panel_, fptr)
            out_ptr = builder.inttoptr(out_, fptr)
            ones, first = splat(one_), splat(start_)
            entry = builder.block
            loop = builder.append_basic_block("tile.features")
            done = builder.append_basic_block("tile.store")
            builder.cbranch(builder.icmp_signed(">", d_, ir.Constant(d_.type, 0)), loop, done)
            builder.position_at_end(loop)
            k = builder.phi(i64)
            k.add_incoming(ir.Constant(i64, 0), entry)
            accumulators = []
            for _ in range(2 * TILE_ROWS):
                accumulators.append(builder.phi(vec))
                accumulators[-1].add_incoming(first, entry)
            base = builder.mul(k, ir.Constant(i64, 2 * lanes))
            landmarks = []
            for h in range(2):
                address = element(panel_ptr, builder.add(base, ir.Constant(i64, h * lanes)))
                landmarks.append(builder.load(builder.bitcast(address, vptr), align=itemsize))
            terms = []
            for r in range(TILE_ROWS):
                x = splat(builder.load(element(row_ptrs[r], k)))
                for h in range(2):
                    acc, y = accumulators[2 * r + h], landmarks[h]
                    if product:
                        t = builder.fsub(x, y)
                        terms.append(builder.fmul(acc, builder.call(fma, [t, t, ones])))
                    else:
                        larger = builder.select(builder.fcmp_ordered(">", x, y), x, y)
                        terms.append(builder.call(fma, [larger, ones, acc]))
            k_next = builder.add(k, ir.Constant(i64, 1))
            k.add_incoming(k_next, loop)
            for acc, term in zip(accumulators, terms, strict=True):
                acc.add_incoming(term, loop)
            branch = builder.cbranch(builder.icmp_signed("<", k_next, d_), loop, done)
            # unrolled by two (LLVM's choice), the loop's live values no longer fit the registers
            module = builder.module
            disable = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
            loop_id = module.add_metadata([disable])
            loop_id.operands = (loop_id, disable)
            branch.set_metadata("llvm.loop", loop_id)
            builder.position_at_end(done)
            results = []
            for term in terms:
                results.append(builder.phi(vec))
                results[-1].add_incoming(term, loop)
                results[-1].add_incoming(first, entry)
            targets = [builder.bitcast(element(out_ptr, builder.add(builder.mul(ir.Constant(i64, r), stride_),
                                                                    ir.Constant(i64, h * lanes))), vptr)
                       for r in range(TILE_ROWS) for h in range(2)]

            def when(flag, change, values):
                """``change(values)`` if ``flag`` is not 0, else ``values``."""
                before = builder.block
                with builder.if_then(builder.icmp_signed("!=", flag, ir.Constant(flag.type, 0))):
                    changed = change(values)
                    after = builder.block
                merged = []
                for old, new in zip(values, changed, strict=True):
                    merged.append(builder.phi(vec))
                    merged[-1].add_incoming(new, after)
                    merged[-1].add_incoming(old, before)
                return merged

            def fold(values):
                folded = []
                partials = builder.inttoptr(partial_, fptr)
                for index, v in enumerate(values):
                    address = element(partials, ir.Constant(i64, index * lanes))
                    before = builder.load(builder.bitcast(address, vptr), align=itemsize)
                    folded.append(builder.fmul(before, v) if product else builder.fadd(before, v))
                return folded

            def section(values):
                if product:
                    return [builder.fdiv(ones, v) for v in values]
                zero = ir.Constant(vec, [0.0] * lanes)
                scales, twos = splat(scale_), builder.fadd(ones, ones)
                row_sums = builder.inttoptr(row_sums_, fptr)
                panel_sums = [builder.load(builder.bitcast(element(builder.inttoptr(panel_sums_, fptr),
                                                                   ir.Constant(i64, h * lanes)), vptr), align=itemsize)
                              for h in range(2)]
                out = []
                for r in range(TILE_ROWS):
                    row_sum = splat(builder.load(element(row_sums, ir.Constant(i64, r))))
                    for h in range(2):
                        t = builder.fsub(builder.fsub(builder.fmul(twos, values[2 * r + h]), row_sum), panel_sums[h])
                        out.append(builder.fmul(scales, builder.select(builder.fcmp_ordered(">", t, zero), t, zero)))
                return out

            for target, value in zip(targets, when(finish_, section, when(partial_, fold, results)), strict=True):
                builder.store(value, target, align=itemsize)
            return context.get_dummy_value()

        return sig, codegen

    return tile


_max_tile = _tile_intrinsic(False)
_product_tile = _tile_intrinsic(True)


@numba.njit(nogil=True, fastmath=_FLAGS, cache=True)
def _row_sums(A, out):
    n, d = A.shape
    for i in range(n):
        s = out.dtype.type(0)
        for k in range(d):
            s += A[i, k]
        out[i] = s
    return out


def panels_shape(n_landmarks: int, n_features: int, dtype) -> tuple[int, int, int]:
    """The shape of the landmarks' panels (:func:`_panels`) for sections in ``dtype``: two vectors of landmarks each."""
    width = 2 * VECTOR_BYTES // np.dtype(dtype).itemsize
    return -(-n_landmarks // width), n_features, width


@numba.njit(nogil=True, cache=True)
def _panels(L, P):
    """``L`` into panels ``P`` of ``w`` landmarks: ``P[p, k, c] = L[p w + c, k]``, the last landmark repeated."""
    m, d = L.shape
    width = P.shape[2]
    for p in range(P.shape[0]):
        for c in range(width):
            src = min(p * width + c, m - 1)
            for k in range(d):
                P[p, k, c] = L[src, k]
    return P


@numba.njit(nogil=True, cache=True)
def _tiles(X, L, P, one, scale, product, out):
    """Laplacian exponents ``-scale |X_i - L_j|_1`` or Cauchy sections ``1 / prod_k (1 + (X_ik - L_jk)^2)``.

    ``X`` in C order; ``P``: a buffer of :func:`panels_shape` for the landmarks' panels;
    ``product`` (Cauchy) is compiled as a constant (one loop for each value).
    """
    numba.literally(product)
    start = out.dtype.type(1) if product else out.dtype.type(0)
    r, d = X.shape
    m = L.shape[0]
    if r == 0 or m == 0:
        return out
    width = P.shape[2]
    _panels(L, P)
    # the rows' and the landmarks' sums, the last landmark's repeated to a whole panel: the
    # Laplacian's finish reads them, the Cauchy's does not
    row_sums = np.zeros(r, dtype=out.dtype)
    landmark_sums = np.zeros(P.shape[0] * width, dtype=out.dtype)
    if not product:
        _row_sums(X, row_sums)
        _row_sums(L, landmark_sums[:m])
        landmark_sums[m:] = landmark_sums[m - 1]
    tile = np.empty((TILE_ROWS, width), dtype=out.dtype)
    partial = np.empty((TILE_ROWS, width), dtype=out.dtype)
    addresses = np.empty(TILE_ROWS, dtype=np.intp)
    tile_sums = np.empty(TILE_ROWS, dtype=out.dtype)
    direct = out.strides[1] == out.itemsize
    out_stride = out.strides[0] // out.itemsize
    block = max(TILE_ROWS, ROW_BLOCK_BYTES // max(1, d * X.itemsize) // TILE_ROWS * TILE_ROWS)
    for i0 in range(0, r, block):
        for p in range(P.shape[0]):
            for i in range(i0, min(i0 + block, r), TILE_ROWS):
                for t in range(TILE_ROWS):
                    # rows beyond the end repeat the last one: same values, not stored
                    addresses[t] = X.ctypes.data + min(i + t, r - 1) * X.strides[0]
                    tile_sums[t] = row_sums[min(i + t, r - 1)]
                rows = min(TILE_ROWS, r - i)
                j = p * width
                cols = min(width, m - j)
                if direct and rows == TILE_ROWS and cols == width:
                    target, stride = out.ctypes.data + i * out.strides[0] + j * out.itemsize, out_stride
                else:
                    target, stride = tile.ctypes.data, width
                sums = landmark_sums.ctypes.data + j * landmark_sums.itemsize
                for k0 in range(0, max(d, 1), FEATURE_BLOCK):
                    k1 = min(k0 + FEATURE_BLOCK, d)
                    panel = P[p].ctypes.data + k0 * width * P.itemsize
                    # the folds before the last in a contiguous tile (in the L1 cache, where rows of
                    # the sections a power of two apart would compete for one cache set)
                    last = k1 == d
                    dest, dest_stride = (target, stride) if last else (partial.ctypes.data, width)
                    before = partial.ctypes.data if k0 > 0 else 0
                    if product:
                        _product_tile(addresses.ctypes.data, panel, k1 - k0, start, one, dest, dest_stride, before,
                                      last, tile_sums.ctypes.data, sums, scale)
                    else:
                        _max_tile(addresses.ctypes.data, panel, k1 - k0, start, one, dest, dest_stride, before,
                                  last, tile_sums.ctypes.data, sums, scale)
                    for t in range(TILE_ROWS):
                        addresses[t] += (k1 - k0) * X.itemsize
                for t in range(TILE_ROWS):
                    addresses[t] -= d * X.itemsize
                if target == tile.ctypes.data:
                    out[i:i + rows, j:j + cols] = tile[:rows, :cols]
    return out


@numba.njit(nogil=True, cache=True)
def laplacian_exponents(X, L, P, scale, one, out):
    """``out[i, j] = -scale |X_i - L_j|_1``, the exponent of a Laplacian section, in the precision of ``X``.

    ``P``: a buffer of :func:`panels_shape`; ``one`` is 1, passed at run time so that the
    compiler keeps the multiply-adds.
    """
    return _tiles(X, L, P, one, -scale, False, out)


@numba.njit(nogil=True, cache=True)
def cauchy_sections(X, L, P, out):
    """``out[i, j] = 1 / prod_k (1 + (X_ik - L_jk)^2)`` of scaled inputs, in the precision of ``X``; ``P`` as above."""
    unit = out.dtype.type(1)
    return _tiles(X, L, P, unit, unit, True, out)
