// One compiler for reduce.wat, shared by the generator and the test that checks its output.
import wabtInit from 'wabt'

export async function compileReduceWat (text) {
  const wabt = await wabtInit()
  const module = wabt.parseWat('reduce.wat', text, { simd: true })
  try {
    module.validate()
    return module.toBinary({ log: false, write_debug_names: false }).buffer
  } finally {
    module.destroy()
  }
}
