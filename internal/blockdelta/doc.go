// Package blockdelta owns the changed-block delta of a VM disk image against
// the base image it was cloned from: Diff writes a compact stream of the blocks
// that differ, Apply rebuilds the image from a copy of the base and the stream.
// Hibernate uploads the stream instead of the whole disk; restore re-applies it
// on another node's copy of the same template image.
//
// # Stream format (version 1)
//
// All integers are big-endian.
//
//	header (64 bytes)
//	  0  magic       8 bytes  "SPACEBLK"
//	  8  version     uint16   1
//	 10  flags       uint16   0 (any other value is refused)
//	 12  block size  uint32   a power of two, 4 KiB .. 4 MiB (default 64 KiB)
//	 16  image size  uint64   size of the reconstructed image
//	 24  base size   uint64   size of the base the stream was made against
//	 32  base id     32 bytes SHA-256 of the caller's base identity string
//	records, offsets strictly increasing
//	  0  kind        uint8    1 = data, 2 = zero
//	  1  offset      uint64   a multiple of the block size, < image size
//	  9  length      uint32   min(block size, image size - offset)
//	 13  data        length bytes, data records only
//	end
//	  0  kind        uint8    0xFF
//	  1  records     uint64   number of records above
//	  9  digest      32 bytes SHA-256 of every stream byte before it
//
// A data record carries the image's bytes for the block; a zero record says
// the block reads as zeros (Apply punches a hole). Blocks without a record are
// equal to the base; bytes past the base's end read as zeros, so an image
// that grew needs records only for the non-zero blocks of its new tail.
//
// The trailer digest covers the header and every record, so Apply detects a
// truncated or altered stream. It is not a digest of the image: the base is
// identified by its size and the caller's base id (for example the template's
// content digest), which Apply checks before it writes anything.
//
// # Finding the changed blocks
//
// Diff considers only blocks where the image or the base has data
// (SEEK_DATA/SEEK_HOLE). When both files are on the same mount and the
// filesystem reports extents (FS_IOC_FIEMAP, btrfs and xfs), a block whose
// whole range maps to the same physical extents in both files is shared by a
// reflink and skipped without reading it. Everything else is read and compared
// byte for byte. Diff requires that neither file changes while it runs (the VM
// is paused, or the image is a snapshot).
package blockdelta
