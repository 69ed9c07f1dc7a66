/**
 * `host:port` addresses as the runtime passes them around (a bracketed IPv6 host allowed).
 *
 * @module
 */

/**
 * The host and port of `address`, for `net.connect`.
 *
 * @example
 * splitAddress('[::1]:6380'); // ['::1', 6380]
 */
export function splitAddress(address: string): [string, number] {
  const i = address.lastIndexOf(':');
  return [address.slice(0, i).replace(/^\[|\]$/g, ''), Number(address.slice(i + 1))];
}
