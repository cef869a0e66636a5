# resume_verify.sh: FILE OFFSET: XOR the byte at OFFSET with 0x5a, in place
import sys
p, off = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read()); b[off] ^= 0x5a; open(p, "wb").write(b)
