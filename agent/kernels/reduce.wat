;; The reducer's per-element work in WebAssembly SIMD: finiteness checks, weighted float64 sums of
;; float32 parts, and means rounded back to float32; the sidecar's divergence sums and 16-bit storage
;; conversions; and the float16 wire codec's (clamp, then narrow; widen). Every operation is the IEEE
;; one the JavaScript twin (reduce-kernels.ts, sidecar/dtypes.ts, compression/float16.ts) performs, so
;; both give bit-identical results; SIMD does 2 to 8 lanes at a time where a JavaScript loop does one
;; element (about 4x less CPU per element on this machine).
;; Compiled by `npm run generate:kernels` into reduce-wasm.ts. Pointers are byte offsets into the
;; imported memory; float32 arrays are 4-byte aligned, float64 arrays 8-byte aligned.
(module
  (import "env" "memory" (memory 1))

  ;; 1 when all n float32 at $v are finite (no NaN, no infinity), else 0.
  (func $finite (export "finite") (param $v i32) (param $n i32) (result i32)
    (local $end i32) (local $tail i32) (local $acc v128) (local $mask v128)
    (local.set $mask (i32x4.splat (i32.const 0x7f800000)))
    (local.set $end (i32.add (local.get $v) (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2))))
    (local.set $tail (i32.add (local.get $end) (i32.shl (i32.and (local.get $n) (i32.const 3)) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $v) (local.get $end)))
        ;; exponent bits all set: infinity or NaN
        (local.set $acc (v128.or (local.get $acc)
          (i32x4.eq (v128.and (v128.load (local.get $v)) (local.get $mask)) (local.get $mask))))
        (local.set $v (i32.add (local.get $v) (i32.const 16)))
        (br $next)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $v) (local.get $tail)))
        (if (i32.eq (i32.and (i32.load (local.get $v)) (i32.const 0x7f800000)) (i32.const 0x7f800000))
          (then (return (i32.const 0))))
        (local.set $v (i32.add (local.get $v) (i32.const 4)))
        (br $next)))
    (i32.eqz (v128.any_true (local.get $acc))))

  ;; sum[i] += w * v[i] for n elements (sum: float64 at $s, v: float32 at $v). With $check set, does
  ;; nothing and returns 0 when v holds a NaN or an infinity; else returns 1.
  (func (export "accumulate") (param $s i32) (param $v i32) (param $n i32) (param $w f64) (param $check i32) (result i32)
    (local $end i32) (local $tail i32) (local $x v128) (local $wv v128)
    (if (i32.and (local.get $check) (i32.eqz (call $finite (local.get $v) (local.get $n))))
      (then (return (i32.const 0))))
    (local.set $wv (f64x2.splat (local.get $w)))
    (local.set $end (i32.add (local.get $v) (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2))))
    (local.set $tail (i32.add (local.get $end) (i32.shl (i32.and (local.get $n) (i32.const 3)) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $v) (local.get $end)))
        (local.set $x (v128.load (local.get $v)))
        (v128.store (local.get $s)
          (f64x2.add (v128.load (local.get $s)) (f64x2.mul (local.get $wv) (f64x2.promote_low_f32x4 (local.get $x)))))
        (v128.store offset=16 (local.get $s)
          (f64x2.add (v128.load offset=16 (local.get $s))
            (f64x2.mul (local.get $wv) (f64x2.promote_low_f32x4
              (i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 (local.get $x) (local.get $x))))))
        (local.set $v (i32.add (local.get $v) (i32.const 16)))
        (local.set $s (i32.add (local.get $s) (i32.const 32)))
        (br $next)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $v) (local.get $tail)))
        (f64.store (local.get $s)
          (f64.add (f64.load (local.get $s)) (f64.mul (local.get $w) (f64.promote_f32 (f32.load (local.get $v))))))
        (local.set $v (i32.add (local.get $v) (i32.const 4)))
        (local.set $s (i32.add (local.get $s) (i32.const 8)))
        (br $next)))
    (i32.const 1))

  ;; out[i] = float32(sum[i] / w) for n elements, and sum[i] = 0 (the slot is ready for its next
  ;; part). Returns 1 when every out[i] is finite (a float64 mean can still overflow float32).
  (func (export "mean") (param $out i32) (param $s i32) (param $n i32) (param $w f64) (result i32)
    (local $end i32) (local $tail i32) (local $wv v128) (local $y v128) (local $acc v128) (local $mask v128) (local $f f32)
    (local.set $mask (i32x4.splat (i32.const 0x7f800000)))
    (local.set $wv (f64x2.splat (local.get $w)))
    (local.set $end (i32.add (local.get $out) (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2))))
    (local.set $tail (i32.add (local.get $end) (i32.shl (i32.and (local.get $n) (i32.const 3)) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $out) (local.get $end)))
        (local.set $y (i8x16.shuffle 0 1 2 3 4 5 6 7 16 17 18 19 20 21 22 23
          (f32x4.demote_f64x2_zero (f64x2.div (v128.load (local.get $s)) (local.get $wv)))
          (f32x4.demote_f64x2_zero (f64x2.div (v128.load offset=16 (local.get $s)) (local.get $wv)))))
        (v128.store (local.get $out) (local.get $y))
        (v128.store (local.get $s) (v128.const i64x2 0 0))
        (v128.store offset=16 (local.get $s) (v128.const i64x2 0 0))
        (local.set $acc (v128.or (local.get $acc) (i32x4.eq (v128.and (local.get $y) (local.get $mask)) (local.get $mask))))
        (local.set $out (i32.add (local.get $out) (i32.const 16)))
        (local.set $s (i32.add (local.get $s) (i32.const 32)))
        (br $next)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $out) (local.get $tail)))
        (local.set $f (f32.demote_f64 (f64.div (f64.load (local.get $s)) (local.get $w))))
        (f32.store (local.get $out) (local.get $f))
        (f64.store (local.get $s) (f64.const 0))
        (if (i32.eq (i32.and (i32.reinterpret_f32 (local.get $f)) (i32.const 0x7f800000)) (i32.const 0x7f800000))
          (then (local.set $acc (v128.const i32x4 -1 -1 -1 -1))))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (local.set $s (i32.add (local.get $s) (i32.const 8)))
        (br $next)))
    (i32.eqz (v128.any_true (local.get $acc))))

  ;; The divergence of a step: for n float32 at $a (what the trainer sent) and $b (the round's result),
  ;; adds (a[i] - b[i])^2 to the float64 lane acc[i mod 4] and a[i]^2 to acc[4 + i mod 4], in float64
  ;; (8 float64 at $acc, 16-byte aligned). Four lanes per sum, each in index order, so the JavaScript
  ;; twin (reduce-kernels.ts, accumulateDistance) gives the same bits; $n a multiple of 4 except for a
  ;; call's last elements keeps lane = index mod 4 across calls.
  (func (export "distance") (param $a i32) (param $b i32) (param $n i32) (param $acc i32)
    (local $end i32) (local $tail i32) (local $x v128) (local $y v128) (local $lo v128) (local $hi v128)
    (local $d01 v128) (local $d23 v128) (local $s01 v128) (local $s23 v128) (local $lane i32) (local $da f64) (local $dd f64)
    (local.set $d01 (v128.load (local.get $acc)))
    (local.set $d23 (v128.load offset=16 (local.get $acc)))
    (local.set $s01 (v128.load offset=32 (local.get $acc)))
    (local.set $s23 (v128.load offset=48 (local.get $acc)))
    (local.set $end (i32.add (local.get $a) (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2))))
    (local.set $tail (i32.add (local.get $end) (i32.shl (i32.and (local.get $n) (i32.const 3)) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $a) (local.get $end)))
        (local.set $x (v128.load (local.get $a)))
        (local.set $y (v128.load (local.get $b)))
        ;; elements 0 and 1
        (local.set $lo (f64x2.promote_low_f32x4 (local.get $x)))
        (local.set $hi (f64x2.sub (local.get $lo) (f64x2.promote_low_f32x4 (local.get $y))))
        (local.set $d01 (f64x2.add (local.get $d01) (f64x2.mul (local.get $hi) (local.get $hi))))
        (local.set $s01 (f64x2.add (local.get $s01) (f64x2.mul (local.get $lo) (local.get $lo))))
        ;; elements 2 and 3
        (local.set $lo (f64x2.promote_low_f32x4 (i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 (local.get $x) (local.get $x))))
        (local.set $hi (f64x2.sub (local.get $lo)
          (f64x2.promote_low_f32x4 (i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 (local.get $y) (local.get $y)))))
        (local.set $d23 (f64x2.add (local.get $d23) (f64x2.mul (local.get $hi) (local.get $hi))))
        (local.set $s23 (f64x2.add (local.get $s23) (f64x2.mul (local.get $lo) (local.get $lo))))
        (local.set $a (i32.add (local.get $a) (i32.const 16)))
        (local.set $b (i32.add (local.get $b) (i32.const 16)))
        (br $next)))
    (v128.store (local.get $acc) (local.get $d01))
    (v128.store offset=16 (local.get $acc) (local.get $d23))
    (v128.store offset=32 (local.get $acc) (local.get $s01))
    (v128.store offset=48 (local.get $acc) (local.get $s23))
    ;; the last n mod 4 elements: lanes 0, 1, 2
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $a) (local.get $tail)))
        (local.set $da (f64.promote_f32 (f32.load (local.get $a))))
        (local.set $dd (f64.sub (local.get $da) (f64.promote_f32 (f32.load (local.get $b)))))
        (f64.store (i32.add (local.get $acc) (local.get $lane))
          (f64.add (f64.load (i32.add (local.get $acc) (local.get $lane))) (f64.mul (local.get $dd) (local.get $dd))))
        (f64.store offset=32 (i32.add (local.get $acc) (local.get $lane))
          (f64.add (f64.load offset=32 (i32.add (local.get $acc) (local.get $lane))) (f64.mul (local.get $da) (local.get $da))))
        (local.set $lane (i32.add (local.get $lane) (i32.const 8)))
        (local.set $a (i32.add (local.get $a) (i32.const 4)))
        (local.set $b (i32.add (local.get $b) (i32.const 4)))
        (br $next))))
  ;; The sidecar's 16-bit storage dtypes (agent/workloads/sidecar/dtypes.ts has the JavaScript twins;
  ;; these give the same bits for every input). 16-bit values are u16 at 2-byte aligned addresses.

  ;; 1 when none of the n 16-bit values at $v has its exponent bits ($mask: 0x7c00 float16, 0x7f80
  ;; bfloat16) all set (an infinity or a NaN), else 0.
  (func (export "finite16") (param $v i32) (param $n i32) (param $mask i32) (result i32)
    (local $end i32) (local $tail i32) (local $acc v128) (local $m v128)
    (local.set $m (i16x8.splat (local.get $mask)))
    (local.set $end (i32.add (local.get $v) (i32.shl (i32.and (local.get $n) (i32.const -8)) (i32.const 1))))
    (local.set $tail (i32.add (local.get $end) (i32.shl (i32.and (local.get $n) (i32.const 7)) (i32.const 1))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $v) (local.get $end)))
        (local.set $acc (v128.or (local.get $acc)
          (i16x8.eq (v128.and (v128.load (local.get $v)) (local.get $m)) (local.get $m))))
        (local.set $v (i32.add (local.get $v) (i32.const 16)))
        (br $next)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $v) (local.get $tail)))
        (if (i32.eq (i32.and (i32.load16_u (local.get $v)) (local.get $mask)) (local.get $mask))
          (then (return (i32.const 0))))
        (local.set $v (i32.add (local.get $v) (i32.const 2)))
        (br $next)))
    (i32.eqz (v128.any_true (local.get $acc))))

  ;; float16 bits (zero-extended, 4 lanes) to float32 bits: the magnitude shifted into float32's
  ;; place and multiplied by 2^112 is exact for normal and subnormal halves alike; an all-ones
  ;; exponent gives infinity, or the canonical NaN 0x7fc00000 (what a JavaScript NaN stores as).
  (func $widen_f16x4 (param $h v128) (result v128)
    (local $mag v128) (local $r v128)
    (local.set $mag (v128.and (local.get $h) (i32x4.splat (i32.const 0x7fff))))
    (local.set $r (f32x4.mul (i32x4.shl (local.get $mag) (i32.const 13)) (f32x4.splat (f32.const 0x1p112))))
    (local.set $r (v128.bitselect (i32x4.splat (i32.const 0x7f800000)) (local.get $r)
      (i32x4.ge_u (local.get $mag) (i32x4.splat (i32.const 0x7c00)))))
    (local.set $r (v128.or (local.get $r)
      (i32x4.shl (v128.and (local.get $h) (i32x4.splat (i32.const 0x8000))) (i32.const 16))))
    (v128.bitselect (i32x4.splat (i32.const 0x7fc00000)) (local.get $r)
      (i32x4.gt_u (local.get $mag) (i32x4.splat (i32.const 0x7c00)))))

  ;; float32 bits (4 lanes) to float16 bits, round to nearest even: below the smallest normal half
  ;; by a float32 add of 0.5 (its rounding is the subnormal's), normals by adding half an ulp less
  ;; one plus the kept mantissa's lowest bit, infinity from 65520 up, and a NaN as the twin makes it
  ;; (0x7e00 with the mantissa's top bits).
  (func $narrow_f16x4 (param $x v128) (result v128)
    (local $a v128) (local $r v128) (local $sub v128)
    (local.set $a (v128.and (local.get $x) (i32x4.splat (i32.const 0x7fffffff))))
    ;; normals: (a - (112 << 23) + 0xfff + odd) >> 13
    (local.set $r (i32x4.shr_u
      (i32x4.add (i32x4.add (local.get $a) (i32x4.splat (i32.const 0xc8000fff)))
        (v128.and (i32x4.shr_u (local.get $a) (i32.const 13)) (i32x4.splat (i32.const 1))))
      (i32.const 13)))
    ;; subnormals and zero: bits(a + 0.5) - bits(0.5)
    (local.set $sub (i32x4.sub (f32x4.add (local.get $a) (f32x4.splat (f32.const 0.5))) (i32x4.splat (i32.const 0x3f000000))))
    (local.set $r (v128.bitselect (local.get $sub) (local.get $r)
      (i32x4.lt_u (local.get $a) (i32x4.splat (i32.const 0x38800000)))))
    (local.set $r (v128.bitselect (i32x4.splat (i32.const 0x7c00)) (local.get $r)
      (i32x4.ge_u (local.get $a) (i32x4.splat (i32.const 0x47800000)))))
    (local.set $r (v128.bitselect
      (v128.or (i32x4.splat (i32.const 0x7e00)) (v128.and (i32x4.shr_u (local.get $a) (i32.const 13)) (i32x4.splat (i32.const 0x3ff))))
      (local.get $r)
      (i32x4.gt_u (local.get $a) (i32x4.splat (i32.const 0x7f800000)))))
    (v128.or (local.get $r) (v128.and (i32x4.shr_u (local.get $x) (i32.const 16)) (i32x4.splat (i32.const 0x8000)))))

  ;; float32 bits (4 lanes) to bfloat16 bits, round to nearest even; a NaN keeps its top bits, made quiet.
  (func $narrow_bf16x4 (param $x v128) (result v128)
    (local $hi v128)
    (local.set $hi (i32x4.shr_u (local.get $x) (i32.const 16)))
    (v128.bitselect
      (v128.or (local.get $hi) (i32x4.splat (i32.const 0x40)))
      (i32x4.shr_u (i32x4.add (i32x4.add (local.get $x) (i32x4.splat (i32.const 0x7fff)))
        (v128.and (local.get $hi) (i32x4.splat (i32.const 1)))) (i32.const 16))
      (i32x4.gt_u (v128.and (local.get $x) (i32x4.splat (i32.const 0x7fffffff))) (i32x4.splat (i32.const 0x7f800000)))))

  ;; float32 at $d = the n 16-bit values at $s widened ($bf: 1 bfloat16, 0 float16). $d may be $s's
  ;; own buffer when the values lie in its upper half ($s >= $d + 2n): each block is read before written.
  ;; Each dtype has its own loop with the conversion written out (a call per block costs 3x here).
  (func (export "widen") (param $s i32) (param $d i32) (param $n i32) (param $bf i32)
    (local $end i32) (local $tail i32) (local $x v128) (local $lo v128) (local $hi v128)
    (local $mag v128) (local $r v128)
    (local.set $end (i32.add (local.get $s) (i32.shl (i32.and (local.get $n) (i32.const -8)) (i32.const 1))))
    (local.set $tail (i32.add (local.get $end) (i32.shl (i32.and (local.get $n) (i32.const 7)) (i32.const 1))))
    (if (local.get $bf)
      (then
        (block $done
          (loop $next
            (br_if $done (i32.ge_u (local.get $s) (local.get $end)))
            (local.set $x (v128.load (local.get $s)))
            (v128.store (local.get $d) (i32x4.shl (i32x4.extend_low_i16x8_u (local.get $x)) (i32.const 16)))
            (v128.store offset=16 (local.get $d) (i32x4.shl (i32x4.extend_high_i16x8_u (local.get $x)) (i32.const 16)))
            (local.set $s (i32.add (local.get $s) (i32.const 16)))
            (local.set $d (i32.add (local.get $d) (i32.const 32)))
            (br $next))))
      (else
        (block $done
          (loop $next
            (br_if $done (i32.ge_u (local.get $s) (local.get $end)))
            (local.set $x (v128.load (local.get $s)))
            ;; as $widen_f16x4, on 8 halves: magnitudes, signs, then the two special cases
            (local.set $mag (v128.and (local.get $x) (i16x8.splat (i32.const 0x7fff))))
            (local.set $lo (i32x4.extend_low_i16x8_u (local.get $mag)))
            (local.set $hi (i32x4.extend_high_i16x8_u (local.get $mag)))
            (local.set $r (f32x4.mul (i32x4.shl (local.get $lo) (i32.const 13)) (f32x4.splat (f32.const 0x1p112))))
            (local.set $r (v128.bitselect (i32x4.splat (i32.const 0x7f800000)) (local.get $r)
              (i32x4.ge_u (local.get $lo) (i32x4.splat (i32.const 0x7c00)))))
            (local.set $r (v128.or (local.get $r)
              (i32x4.shl (i32x4.extend_low_i16x8_u (v128.and (local.get $x) (i16x8.splat (i32.const 0x8000)))) (i32.const 16))))
            (v128.store (local.get $d) (v128.bitselect (i32x4.splat (i32.const 0x7fc00000)) (local.get $r)
              (i32x4.gt_u (local.get $lo) (i32x4.splat (i32.const 0x7c00)))))
            (local.set $r (f32x4.mul (i32x4.shl (local.get $hi) (i32.const 13)) (f32x4.splat (f32.const 0x1p112))))
            (local.set $r (v128.bitselect (i32x4.splat (i32.const 0x7f800000)) (local.get $r)
              (i32x4.ge_u (local.get $hi) (i32x4.splat (i32.const 0x7c00)))))
            (local.set $r (v128.or (local.get $r)
              (i32x4.shl (i32x4.extend_high_i16x8_u (v128.and (local.get $x) (i16x8.splat (i32.const 0x8000)))) (i32.const 16))))
            (v128.store offset=16 (local.get $d) (v128.bitselect (i32x4.splat (i32.const 0x7fc00000)) (local.get $r)
              (i32x4.gt_u (local.get $hi) (i32x4.splat (i32.const 0x7c00)))))
            (local.set $s (i32.add (local.get $s) (i32.const 16)))
            (local.set $d (i32.add (local.get $d) (i32.const 32)))
            (br $next)))))
    ;; the last n mod 8 values, one at a time in lane 0
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $s) (local.get $tail)))
        (local.set $lo (i32x4.splat (i32.load16_u (local.get $s))))
        (local.set $lo (if (result v128) (local.get $bf)
          (then (i32x4.shl (local.get $lo) (i32.const 16)))
          (else (call $widen_f16x4 (local.get $lo)))))
        (i32.store (local.get $d) (i32x4.extract_lane 0 (local.get $lo)))
        (local.set $s (i32.add (local.get $s) (i32.const 2)))
        (local.set $d (i32.add (local.get $d) (i32.const 4)))
        (br $next))))

  ;; The n float32 at $v clamped to [-$limit, $limit] in place: the float16 wire codec's rule (hivemind's),
  ;; a large value degrades to 65504 instead of becoming infinite, before `narrow`. A NaN stays as it
  ;; is, sign and payload: pmin and pmax return their first operand when the comparison is false.
  (func (export "clamp") (param $v i32) (param $n i32) (param $limit f32)
    (local $end i32) (local $tail i32) (local $hi v128) (local $lo v128)
    (local.set $hi (f32x4.splat (local.get $limit)))
    (local.set $lo (f32x4.neg (local.get $hi)))
    (local.set $end (i32.add (local.get $v) (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2))))
    (local.set $tail (i32.add (local.get $end) (i32.shl (i32.and (local.get $n) (i32.const 3)) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $v) (local.get $end)))
        (v128.store (local.get $v) (f32x4.pmax (f32x4.pmin (v128.load (local.get $v)) (local.get $hi)) (local.get $lo)))
        (local.set $v (i32.add (local.get $v) (i32.const 16)))
        (br $next)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $v) (local.get $tail)))
        (f32.store (local.get $v) (f32x4.extract_lane 0
          (f32x4.pmax (f32x4.pmin (v128.load32_splat (local.get $v)) (local.get $hi)) (local.get $lo))))
        (local.set $v (i32.add (local.get $v) (i32.const 4)))
        (br $next))))

  ;; u16 at $d = the n float32 at $s narrowed, round to nearest even ($bf: 1 bfloat16, 0 float16).
  ;; $d may be $s itself: each block of values is read before its narrower result is written.
  (func (export "narrow") (param $s i32) (param $d i32) (param $n i32) (param $bf i32)
    (local $end i32) (local $tail i32) (local $lo v128) (local $hi v128) (local $a v128) (local $r v128)
    (local.set $end (i32.add (local.get $s) (i32.shl (i32.and (local.get $n) (i32.const -8)) (i32.const 2))))
    (local.set $tail (i32.add (local.get $end) (i32.shl (i32.and (local.get $n) (i32.const 7)) (i32.const 2))))
    (if (local.get $bf)
      (then
        (block $done
          (loop $next
            (br_if $done (i32.ge_u (local.get $s) (local.get $end)))
            (local.set $lo (v128.load (local.get $s)))
            (local.set $hi (v128.load offset=16 (local.get $s)))
            ;; as $narrow_bf16x4, on 8 values
            (local.set $lo (v128.bitselect
              (v128.or (i32x4.shr_u (local.get $lo) (i32.const 16)) (i32x4.splat (i32.const 0x40)))
              (i32x4.shr_u (i32x4.add (i32x4.add (local.get $lo) (i32x4.splat (i32.const 0x7fff)))
                (v128.and (i32x4.shr_u (local.get $lo) (i32.const 16)) (i32x4.splat (i32.const 1)))) (i32.const 16))
              (i32x4.gt_u (v128.and (local.get $lo) (i32x4.splat (i32.const 0x7fffffff))) (i32x4.splat (i32.const 0x7f800000)))))
            (local.set $hi (v128.bitselect
              (v128.or (i32x4.shr_u (local.get $hi) (i32.const 16)) (i32x4.splat (i32.const 0x40)))
              (i32x4.shr_u (i32x4.add (i32x4.add (local.get $hi) (i32x4.splat (i32.const 0x7fff)))
                (v128.and (i32x4.shr_u (local.get $hi) (i32.const 16)) (i32x4.splat (i32.const 1)))) (i32.const 16))
              (i32x4.gt_u (v128.and (local.get $hi) (i32x4.splat (i32.const 0x7fffffff))) (i32x4.splat (i32.const 0x7f800000)))))
            (v128.store (local.get $d) (i16x8.narrow_i32x4_u (local.get $lo) (local.get $hi)))
            (local.set $s (i32.add (local.get $s) (i32.const 32)))
            (local.set $d (i32.add (local.get $d) (i32.const 16)))
            (br $next))))
      (else
        (block $done
          (loop $next
            (br_if $done (i32.ge_u (local.get $s) (local.get $end)))
            (local.set $lo (v128.load (local.get $s)))
            (local.set $hi (v128.load offset=16 (local.get $s)))
            ;; as $narrow_f16x4 on $lo: normals, then subnormals, overflow and NaN over them, then the sign
            (local.set $a (v128.and (local.get $lo) (i32x4.splat (i32.const 0x7fffffff))))
            (local.set $r (i32x4.shr_u
              (i32x4.add (i32x4.add (local.get $a) (i32x4.splat (i32.const 0xc8000fff)))
                (v128.and (i32x4.shr_u (local.get $a) (i32.const 13)) (i32x4.splat (i32.const 1))))
              (i32.const 13)))
            (local.set $r (v128.bitselect
              (i32x4.sub (f32x4.add (local.get $a) (f32x4.splat (f32.const 0.5))) (i32x4.splat (i32.const 0x3f000000)))
              (local.get $r)
              (i32x4.lt_u (local.get $a) (i32x4.splat (i32.const 0x38800000)))))
            (local.set $r (v128.bitselect (i32x4.splat (i32.const 0x7c00)) (local.get $r)
              (i32x4.ge_u (local.get $a) (i32x4.splat (i32.const 0x47800000)))))
            (local.set $r (v128.bitselect
              (v128.or (i32x4.splat (i32.const 0x7e00)) (v128.and (i32x4.shr_u (local.get $a) (i32.const 13)) (i32x4.splat (i32.const 0x3ff))))
              (local.get $r)
              (i32x4.gt_u (local.get $a) (i32x4.splat (i32.const 0x7f800000)))))
            (local.set $lo (v128.or (local.get $r) (v128.and (i32x4.shr_u (local.get $lo) (i32.const 16)) (i32x4.splat (i32.const 0x8000)))))
            ;; as $narrow_f16x4 on $hi: normals, then subnormals, overflow and NaN over them, then the sign
            (local.set $a (v128.and (local.get $hi) (i32x4.splat (i32.const 0x7fffffff))))
            (local.set $r (i32x4.shr_u
              (i32x4.add (i32x4.add (local.get $a) (i32x4.splat (i32.const 0xc8000fff)))
                (v128.and (i32x4.shr_u (local.get $a) (i32.const 13)) (i32x4.splat (i32.const 1))))
              (i32.const 13)))
            (local.set $r (v128.bitselect
              (i32x4.sub (f32x4.add (local.get $a) (f32x4.splat (f32.const 0.5))) (i32x4.splat (i32.const 0x3f000000)))
              (local.get $r)
              (i32x4.lt_u (local.get $a) (i32x4.splat (i32.const 0x38800000)))))
            (local.set $r (v128.bitselect (i32x4.splat (i32.const 0x7c00)) (local.get $r)
              (i32x4.ge_u (local.get $a) (i32x4.splat (i32.const 0x47800000)))))
            (local.set $r (v128.bitselect
              (v128.or (i32x4.splat (i32.const 0x7e00)) (v128.and (i32x4.shr_u (local.get $a) (i32.const 13)) (i32x4.splat (i32.const 0x3ff))))
              (local.get $r)
              (i32x4.gt_u (local.get $a) (i32x4.splat (i32.const 0x7f800000)))))
            (local.set $hi (v128.or (local.get $r) (v128.and (i32x4.shr_u (local.get $hi) (i32.const 16)) (i32x4.splat (i32.const 0x8000)))))
            (v128.store (local.get $d) (i16x8.narrow_i32x4_u (local.get $lo) (local.get $hi)))
            (local.set $s (i32.add (local.get $s) (i32.const 32)))
            (local.set $d (i32.add (local.get $d) (i32.const 16)))
            (br $next)))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $s) (local.get $tail)))
        (local.set $lo (v128.load32_splat (local.get $s)))
        (local.set $lo (if (result v128) (local.get $bf)
          (then (call $narrow_bf16x4 (local.get $lo)))
          (else (call $narrow_f16x4 (local.get $lo)))))
        (i32.store16 (local.get $d) (i32x4.extract_lane 0 (local.get $lo)))
        (local.set $s (i32.add (local.get $s) (i32.const 4)))
        (local.set $d (i32.add (local.get $d) (i32.const 2)))
        (br $next))))
)
