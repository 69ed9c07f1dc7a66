/*
 * rtjob's shared-memory mapper: maps a file of /dev/shm copy-on-write and hands it to JavaScript
 * as an external ArrayBuffer that unmaps itself when collected. Built by runtime/native-addon.ts
 * at first use; runtime/client/shm-map.ts loads it and falls back to reading the file without it.
 *
 * mapFile(path, bytes) -> ArrayBuffer of `bytes` bytes, MAP_PRIVATE: a write by this process
 * copies the page it touches and never reaches the file or another process's mapping. The file
 * may be unlinked at once: the mapping keeps its pages.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void unmap(napi_env env, void *data, void *hint) {
  size_t bytes = (size_t)(uintptr_t)hint;
  munmap(data, bytes);
  int64_t left;
  napi_adjust_external_memory(env, -(int64_t)bytes, &left);
}

static napi_value fail(napi_env env, const char *what, const char *path, int err) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s %s: %s", what, path, strerror(err));
  napi_throw_error(env, "ERR_RTJOB_MMAP", msg);
  return NULL;
}

static napi_value map_file(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2) {
    napi_throw_type_error(env, NULL, "mapFile(path, bytes)");
    return NULL;
  }
  char path[4096];
  size_t len = 0;
  double want = 0;
  if (napi_get_value_string_utf8(env, argv[0], path, sizeof path, &len) != napi_ok ||
      len >= sizeof path - 1 || napi_get_value_double(env, argv[1], &want) != napi_ok ||
      !(want >= 1) || want > (double)SIZE_MAX || want != (double)(size_t)want) {
    napi_throw_type_error(env, NULL, "mapFile(path, bytes): a path and a positive size");
    return NULL;
  }
  size_t bytes = (size_t)want;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fail(env, "cannot open", path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return fail(env, "cannot stat", path, e);
  }
  /* Pages past the end of the file would fault (SIGBUS) when touched. */
  if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < (uint64_t)bytes) {
    close(fd);
    napi_throw_error(env, "ERR_RTJOB_MMAP", "the file is shorter than the object");
    return NULL;
  }
  /*
   * Read-only with MAP_POPULATE maps the file's pages up front without copying them (populating
   * a writable private mapping would copy every page); write access is added after, and a write
   * then copies only the page it touches.
   */
  void *p = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return fail(env, "cannot map", path, e);
  if (mprotect(p, bytes, PROT_READ | PROT_WRITE) != 0) {
    e = errno;
    munmap(p, bytes);
    return fail(env, "cannot make writable the mapping of", path, e);
  }
  napi_value ab;
  if (napi_create_external_arraybuffer(env, p, bytes, unmap, (void *)(uintptr_t)bytes, &ab) !=
      napi_ok) {
    munmap(p, bytes);
    napi_throw_error(env, "ERR_RTJOB_MMAP", "cannot create an external ArrayBuffer");
    return NULL;
  }
  /* The mapping holds the file's pages until collected: let the collector see their size. */
  int64_t total;
  napi_adjust_external_memory(env, (int64_t)bytes, &total);
  return ab;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  napi_create_function(env, "mapFile", NAPI_AUTO_LENGTH, map_file, NULL, &fn);
  napi_set_named_property(env, exports, "mapFile", fn);
  return exports;
}
