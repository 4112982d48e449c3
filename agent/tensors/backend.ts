import type * as tfType from '@tensorflow/tfjs'

export type Tf = typeof tfType

export interface TensorBackend {
  readonly tf: Tf
  /** tfjs-node-gpu, tfjs-node, wasm or cpu: logged at start and exported as a metric label. */
  readonly name: string
}

let loaded: Promise<TensorBackend> | null = null

/**
 * The fastest tfjs backend installed: tfjs-node-gpu (the GPU image), tfjs-node, then the WASM
 * backend (ships its binaries in the npm package), then pure-JS cpu. The native packages are
 * optional: their install step downloads libtensorflow, which an offline machine cannot.
 */
export async function loadTensorBackend (preferred?: string): Promise<TensorBackend> {
  loaded ??= (async () => {
    const attempts: Array<[string, string]> = [['@tensorflow/tfjs-node-gpu', 'tfjs-node-gpu'], ['@tensorflow/tfjs-node', 'tfjs-node']]
    if (preferred === undefined || preferred.startsWith('tfjs-node')) {
      for (const [pkg, name] of attempts) {
        if (preferred !== undefined && preferred !== name) continue
        try {
          const tf = (await import(pkg)) as Tf
          return { tf, name }
        } catch { /* not installed: try the next */ }
      }
    }
    const tf = await import('@tensorflow/tfjs')
    if (preferred !== 'cpu') {
      try {
        await import('@tensorflow/tfjs-backend-wasm')
        if (await tf.setBackend('wasm')) { await tf.ready(); return { tf, name: 'wasm' } }
      } catch { /* fall through to cpu */ }
    }
    await tf.setBackend('cpu')
    await tf.ready()
    return { tf, name: 'cpu' }
  })()
  return await loaded
}
