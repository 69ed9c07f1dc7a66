/** The model's weight format: named tensors in HF naming, row-major float32. @module */

/** Named tensors in HF naming, row-major float32, as shipped over the wire. */
export type NamedTensors = Record<string, { shape: number[]; data: Float32Array }>;
