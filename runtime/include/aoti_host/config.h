// The configuration record of a translation unit.
//
// Every translation unit that includes an aoti_host header (and every one the SCons builders compile:
// they force-include this file) puts one SHT_NOTE record into its object file: the source file's name and
// the value of each macro that changes what the public headers declare. Notes survive linking
// (--gc-sections too), so a linked binary still carries one record per object, and the post-link check
// (toolchain/elf/config_records.py, `aoti-toolchain verify`) fails when two objects of one binary saw
// different values: the one-definition-rule break of a test compiled without CUDA_AVAILABLE.
//
// Keys: CUDA_AVAILABLE ("unset" when the translation unit never defined it), and in C++ translation units
// the standard library and the libstdc++ macros that change the layout of std:: types. A key a record
// lacks (a C translation unit has no C++ standard library) conflicts with nothing.
#pragma once

#define AOTI_CONFIG_STR_(x) #x
#define AOTI_CONFIG_STR(x) AOTI_CONFIG_STR_(x)

#ifdef CUDA_AVAILABLE
#define AOTI_CONFIG_REC_CUDA "CUDA_AVAILABLE=" AOTI_CONFIG_STR(CUDA_AVAILABLE) "\\n"
#else
#define AOTI_CONFIG_REC_CUDA "CUDA_AVAILABLE=unset\\n"
#endif

#if defined(__cplusplus)
// <ciso646> is empty in C++17 but defines the standard library's identification macros.
#if __cplusplus < 202002L
#include <ciso646>
#else
#include <version>
#endif
#if defined(_LIBCPP_VERSION)
#define AOTI_CONFIG_REC_STDLIB "cxx_stdlib=libc++\\n_LIBCPP_ABI_VERSION=" AOTI_CONFIG_STR(_LIBCPP_ABI_VERSION) "\\n"
#elif defined(__GLIBCXX__)
#if defined(_GLIBCXX_DEBUG)
#define AOTI_CONFIG_REC_GLIBCXX_DEBUG "_GLIBCXX_DEBUG=1\\n"
#else
#define AOTI_CONFIG_REC_GLIBCXX_DEBUG "_GLIBCXX_DEBUG=0\\n"
#endif
#define AOTI_CONFIG_REC_STDLIB                                                                     \
  "cxx_stdlib=libstdc++\\n_GLIBCXX_USE_CXX11_ABI=" AOTI_CONFIG_STR(_GLIBCXX_USE_CXX11_ABI) "\\n" \
      AOTI_CONFIG_REC_GLIBCXX_DEBUG
#else
#define AOTI_CONFIG_REC_STDLIB "cxx_stdlib=other\\n"
#endif
#else
#define AOTI_CONFIG_REC_STDLIB ""
#endif

#if defined(__GNUC__) && defined(__ELF__) && !defined(__CUDA_ARCH__) && !defined(AOTI_NO_CONFIG_RECORD)
#if defined(AOTI_CONFIG_SOURCE_NAME)
// Set by our builders: clang expands __BASE_FILE__ in a force-included header to "<built-in>".
#define AOTI_CONFIG_SOURCE AOTI_CONFIG_SOURCE_NAME
#elif defined(__BASE_FILE__)
#define AOTI_CONFIG_SOURCE __BASE_FILE__
#else
#define AOTI_CONFIG_SOURCE __FILE__
#endif
// An ELF note: name "AOTI", type 0x414f0001, descriptor "source=<file>\n<KEY>=<value>\n...", NUL-ended.
// The section is allocated so that strip keeps it and it also lands in a PT_NOTE segment.
__asm__(
    ".pushsection .note.aoti.config,\"a\",@note\n"
    ".balign 4\n"
    ".long 2f - 1f\n"
    ".long 4f - 3f\n"
    ".long 0x414f0001\n"
    "1: .asciz \"AOTI\"\n"
    "2: .balign 4\n"
    "3: .asciz \"source=" AOTI_CONFIG_SOURCE "\\n" AOTI_CONFIG_REC_CUDA AOTI_CONFIG_REC_STDLIB "\"\n"
    "4: .balign 4\n"
    ".popsection\n");
#endif
