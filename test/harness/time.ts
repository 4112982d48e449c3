/** Kubernetes wire formats for timestamps (metav1.Time: seconds; metav1.MicroTime: microseconds). */
export function rfc3339 (date = new Date()): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z')
}

export function microTime (date = new Date()): string {
  return date.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z')
}

/** The client's typed models declare Date; the serializer passes strings through unchanged. */
export function wireTime (value: string): Date {
  return value as unknown as Date
}

export async function sleep (ms: number): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, ms))
}
