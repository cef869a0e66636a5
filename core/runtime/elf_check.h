/* Checking that a plugin file is a whole ELF shared object for this machine before dlopen:
 * the dynamic loader maps a truncated file and then touches pages past its end (SIGBUS), so a
 * damaged or half-copied .so must be refused by reading it, never by loading it. */
#ifndef LOOM_CORE_ELF_CHECK_H
#define LOOM_CORE_ELF_CHECK_H

#include <stddef.h>

/* Read the ELF header, program headers and section header table of `path` and check: ELF magic,
 * this host's class (64-bit), byte order and machine, type ET_DYN, and that the program header
 * table, every segment's file bytes (p_offset + p_filesz) and the section header table lie within
 * the file. Also refuses anything that is not a regular file (a FIFO would block). Returns 0, or
 * -1 with one reason in err ("truncated: segment 2 ends at byte 14680, the file has 4096 bytes");
 * the caller prefixes the plugin name and file. */
int loom__elf_check(const char *path, char *err, size_t errlen);

#endif
