package etcdengine

// StartEmbedded is startEmbedded, for the package's examples.
var StartEmbedded = startEmbedded
