/** HF → GGUF for llama.cpp. */
export type { GgufDtype, GgufTensorInfo, GgufValue } from './format.ts';
export { GgufError, ggufDtypes, encodeTensor, toF16, toQ8_0 } from './format.ts';
export type { GgufLayout, GgufPlacement, GgufRewriteOptions, GgufWriteOptions } from './convert.ts';
export {
  convertHfToGguf,
  ggufArch,
  ggufTensorName,
  permuteRotary,
  readGgufTensorBytes,
  rewriteGgufTensors,
  writeGgufTensorBytes,
  writeGguf,
} from './convert.ts';
export { writeGgufLoraAdapter } from './lora.ts';
