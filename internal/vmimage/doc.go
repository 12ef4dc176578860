// Package vmimage makes what the vm runtime boots, all cached by content
// hash under one cache directory:
//
//   - the guest kernel: Debian's cloud kernel, fetched with the system's
//     package manager (FetchKernel; it boots on QEMU's q35 machine, its
//     virtio drivers are modules), or the minimal kernel compiled from
//     Debian's linux-source package with GuestKernelConfig, everything built
//     in (BuildMinimalKernel; it boots on QEMU's microvm machine);
//   - the initramfs: space-guest as /init and the kernel's modules, if any
//     (BuildInitramfs);
//   - the root disk image of a template (RootImage) and its clones
//     (CloneImage, reflinks where the filesystem has them).
package vmimage
