/* A plugin file's ELF structure checked against its size (see elf_check.h). */
#define _GNU_SOURCE
#include "runtime/elf_check.h"

#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/input_file.h"

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#define HOST_MACHINE_NAME "x86-64"
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#define HOST_MACHINE_NAME "aarch64"
#elif defined(__powerpc64__)
#define HOST_MACHINE EM_PPC64
#define HOST_MACHINE_NAME "ppc64"
#elif defined(__riscv) && __riscv_xlen == 64
#define HOST_MACHINE EM_RISCV
#define HOST_MACHINE_NAME "riscv64"
#endif

#if UINTPTR_MAX != 0xffffffffffffffffu
#error "loom's plugin check reads 64-bit ELF files only"
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_DATA ELFDATA2LSB
#else
#define HOST_DATA ELFDATA2MSB
#endif

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* [off, off + len) inside a file of `size` bytes, without overflow. */
static int within(uint64_t off, uint64_t len, uint64_t size) {
  return off <= size && len <= size - off;
}

static int read_at(int fd, void *buf, size_t len, uint64_t off) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

static int check_fd(int fd, uint64_t size, char *err, size_t errlen) {
  Elf64_Ehdr eh;
  size_t head = size < EI_NIDENT ? (size_t)size : EI_NIDENT;
  if (read_at(fd, eh.e_ident, head, 0) != 0)
    return fail(err, errlen, "read error: %s", strerror(errno));
  if (memcmp(eh.e_ident, ELFMAG, head < SELFMAG ? head : SELFMAG) != 0 || size == 0)
    return fail(err, errlen, "not an ELF shared object (no ELF magic at the start of the file)");
  if (size < sizeof eh)
    return fail(err, errlen, "truncated: %llu bytes, shorter than the %zu-byte ELF header",
                (unsigned long long)size, sizeof eh);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64)
    return fail(err, errlen, "a %s ELF file; this loom is 64-bit",
                eh.e_ident[EI_CLASS] == ELFCLASS32 ? "32-bit" : "bad-class");
  if (eh.e_ident[EI_DATA] != HOST_DATA)
    return fail(err, errlen, "an ELF file of the other byte order");
  if (read_at(fd, &eh, sizeof eh, 0) != 0)
    return fail(err, errlen, "read error: %s", strerror(errno));
  if (eh.e_type != ET_DYN)
    return fail(err, errlen, "an ELF file of type %u, not a shared object (ET_DYN): build the "
                "plugin as a MODULE/SHARED library", (unsigned)eh.e_type);
#ifdef HOST_MACHINE
  if (eh.e_machine != HOST_MACHINE)
    return fail(err, errlen, "built for ELF machine %u, this loom runs on %s (%u)",
                (unsigned)eh.e_machine, HOST_MACHINE_NAME, (unsigned)HOST_MACHINE);
#endif
  if (eh.e_phnum == 0 || eh.e_phentsize != sizeof(Elf64_Phdr))
    return fail(err, errlen, "bad ELF header: %u program headers of %u bytes (expected >= 1 of "
                "%zu)", (unsigned)eh.e_phnum, (unsigned)eh.e_phentsize, sizeof(Elf64_Phdr));
  uint64_t ph_bytes = (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr);
  if (!within(eh.e_phoff, ph_bytes, size))
    return fail(err, errlen, "truncated: the program header table ends at byte %llu, the file "
                "has %llu bytes", (unsigned long long)eh.e_phoff + ph_bytes,
                (unsigned long long)size);
  Elf64_Phdr *ph = malloc(ph_bytes);
  if (!ph) return fail(err, errlen, "out of memory reading the program headers");
  if (read_at(fd, ph, ph_bytes, eh.e_phoff) != 0) {
    free(ph);
    return fail(err, errlen, "read error: %s", strerror(errno));
  }
  for (unsigned i = 0; i < eh.e_phnum; i++) {
    if (ph[i].p_type == PT_NULL || within(ph[i].p_offset, ph[i].p_filesz, size)) continue;
    unsigned long long end = ph[i].p_offset + ph[i].p_filesz; /* may wrap: shown as is */
    free(ph);
    return fail(err, errlen, "truncated: segment %u ends at byte %llu, the file has %llu bytes "
                "(an interrupted copy or download?)", i, end, (unsigned long long)size);
  }
  free(ph);
  if (eh.e_shoff != 0) {
    if (eh.e_shentsize != sizeof(Elf64_Shdr))
      return fail(err, errlen, "bad ELF header: section headers of %u bytes (expected %zu)",
                  (unsigned)eh.e_shentsize, sizeof(Elf64_Shdr));
    uint64_t sh_bytes = (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr);
    if (!within(eh.e_shoff, sh_bytes, size))
      return fail(err, errlen, "truncated: the section header table ends at byte %llu, the "
                  "file has %llu bytes", (unsigned long long)eh.e_shoff + sh_bytes,
                  (unsigned long long)size);
  }
  return 0;
}

int loom__elf_check(const char *path, char *err, size_t errlen) {
  off_t size;
  char why[512];
  int fd = loom__open_regular(path, &size, why, sizeof why);
  if (fd < 0) return fail(err, errlen, "%s", why);
  int rc = check_fd(fd, (uint64_t)size, err, errlen);
  close(fd);
  return rc;
}
