import type { Tf } from '../../tensors/backend.js'
import type { NamedTensor } from '../../averager.js'
import { seededRandom } from '../../util/random.js'
import { CLASSES, FEATURES, type Dataset } from './synthetic-data.js'

const HIDDEN = 32

/**
 * A small MLP (FEATURES → 32 → CLASSES) trained by plain SGD on minibatches. Weights live in
 * tfjs variables; averaging reads and writes them as flat Float32Arrays.
 */
export class LocalModel {
  private readonly variables: ReturnType<Tf['variable']>[]
  private readonly optimizer: ReturnType<Tf['train']['sgd']>
  private readonly random: () => number
  readonly shapes: ReadonlyArray<[string, number[]]> = [['dense1/kernel', [FEATURES, HIDDEN]], ['dense1/bias', [HIDDEN]], ['dense2/kernel', [HIDDEN, CLASSES]], ['dense2/bias', [CLASSES]]]

  constructor (private readonly tf: Tf, seed: number, learningRate = 0.05) {
    // Every agent starts from the same initial weights, as a real swarm does after state download.
    const init = seededRandom('avs-init')
    this.variables = this.shapes.map(([name, shape]) => {
      const n = shape.reduce((a, b) => a * b, 1)
      const values = new Float32Array(n)
      if (shape.length === 2) for (let i = 0; i < n; i++) values[i] = (init() * 2 - 1) * Math.sqrt(6 / (shape[0] + shape[1]))
      return tf.variable(tf.tensor(values, shape), true, `${name}-${seed}-${Math.random()}`)
    })
    this.optimizer = tf.train.sgd(learningRate)
    this.random = seededRandom(`avs-batches-${seed}`)
  }

  private logits (x: ReturnType<Tf['tensor2d']>): ReturnType<Tf['tensor2d']> {
    const [w1, b1, w2, b2] = this.variables
    return this.tf.tidy(() => x.matMul(w1 as never).add(b1).relu().matMul(w2 as never).add(b2)) as ReturnType<Tf['tensor2d']>
  }

  /** n SGD steps on random minibatches of the dataset; returns the mean training loss. */
  train (data: Dataset, steps: number, batch = 64): number {
    const { tf } = this
    let total = 0
    for (let s = 0; s < steps; s++) {
      const xs = new Float32Array(batch * FEATURES)
      const ys = new Int32Array(batch)
      for (let b = 0; b < batch; b++) {
        const i = Math.floor(this.random() * data.size)
        xs.set(data.x.subarray(i * FEATURES, (i + 1) * FEATURES), b * FEATURES)
        ys[b] = data.y[i]
      }
      const loss = tf.tidy(() => {
        const x = tf.tensor2d(xs, [batch, FEATURES])
        const y = tf.oneHot(tf.tensor1d(ys, 'int32'), CLASSES)
        const cost = this.optimizer.minimize(() => tf.losses.softmaxCrossEntropy(y, this.logits(x)) as never, true)
        return cost!.dataSync()[0]
      })
      total += loss
    }
    return total / Math.max(1, steps)
  }

  /** Mean cross-entropy on a dataset (no training). */
  evaluate (data: Dataset): number {
    const { tf } = this
    return tf.tidy(() => {
      const x = tf.tensor2d(data.x, [data.size, FEATURES])
      const y = tf.oneHot(tf.tensor1d(data.y, 'int32'), CLASSES)
      return (tf.losses.softmaxCrossEntropy(y, this.logits(x)) as ReturnType<Tf['scalar']>).dataSync()[0]
    })
  }

  /** Fresh copies of the weights as named flat tensors. */
  weights (): NamedTensor[] {
    return this.shapes.map(([name, shape], i) => ({ name, shape, data: new Float32Array(this.variables[i].dataSync()) }))
  }

  copyWeightsInto (target: readonly NamedTensor[]): void {
    this.variables.forEach((v, i) => { target[i].data.set(v.dataSync()) })
  }

  loadWeights (source: readonly NamedTensor[]): void {
    this.tf.tidy(() => { this.variables.forEach((v, i) => { v.assign(this.tf.tensor(source[i].data, this.shapes[i][1])) }) })
  }

  dispose (): void {
    for (const v of this.variables) v.dispose()
  }
}
