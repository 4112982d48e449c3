/** Holds this thread for `ms`, as a long GC or a CPU-starved process does: timers come due, I/O waits unread. */
export function stall (ms: number): void {
  const until = performance.now() + ms
  while (performance.now() < until) { /* our own event loop held */ }
}
