package guestd

// ParseMetadataHeaders is parseMetadataHeaders, for the external tests.
var ParseMetadataHeaders = parseMetadataHeaders
