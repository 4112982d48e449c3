;; The reducer's per-element work in WebAssembly SIMD: finiteness checks, weighted float64 sums of
;; float32 parts, and means rounded back to float32; and the sidecar's divergence sums. Every operation is the IEEE one the JavaScript
;; fallback (reduce-kernels.ts) performs, so both give bit-identical results; SIMD does 2 to 4 lanes at
;; a time where a JavaScript loop does one element (about 4x less CPU per element on this machine).
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
        (br $next)))))
