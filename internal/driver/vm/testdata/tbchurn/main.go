// Command tbchurn is a guest program of TestVMMCgroup: it writes fresh x86-64
// machine code into an executable mapping and runs it, round after round.
// Under TCG every round is code QEMU has not translated yet, so a guest
// running it fills QEMU's translation buffer as fast as QEMU translates: the
// way a JIT (or a guest bent on it) grows the VMM's memory past the guest's
// RAM when the buffer is not bounded.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

func main() {
	rounds := flag.Int("rounds", 1000, "rounds of fresh code to run")
	size := flag.Int("kib", 256, "KiB of code per round")
	flag.Parse()
	n := *size << 10
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE|syscall.PROT_EXEC, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tbchurn: mmap:", err)
		os.Exit(1)
	}
	insns := (n - 1) / 5
	var sum uint32
	for r := 0; r < *rounds; r++ {
		// add eax, imm32 (05 id) with an immediate new every round, so no
		// two rounds are the same code; then ret.
		for i := 0; i < insns; i++ {
			mem[i*5] = 0x05
			binary.LittleEndian.PutUint32(mem[i*5+1:], uint32(r*insns+i))
		}
		mem[insns*5] = 0xc3
		sum += call(mem)
	}
	fmt.Println("done", *rounds, sum)
}

// call runs the code at the start of code as a Go function returning a
// uint32 (in RAX under the register ABI); it touches RAX and the flags only.
func call(code []byte) uint32 {
	p := unsafe.Pointer(&code[0])
	fv := &p
	f := *(*func() uint32)(unsafe.Pointer(&fv))
	return f()
}
