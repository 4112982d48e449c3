// The part of the WebAssembly JavaScript API the kernels use (tsconfig's lib has no DOM types,
// and @types/node 22 does not declare the global).
declare namespace WebAssembly {
  class Module {
    constructor (bytes: Uint8Array)
  }
  class Memory {
    constructor (descriptor: { initial: number, maximum?: number })
    readonly buffer: ArrayBuffer
    /** Adds pages of 64 KiB; views of the old buffer are detached. Returns the old size in pages. */
    grow (pages: number): number
  }
  class Instance {
    constructor (module: Module, imports?: Record<string, Record<string, unknown>>)
    readonly exports: Record<string, unknown>
  }
}
