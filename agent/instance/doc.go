// Package instance finds the EC2 instance id this agent runs on, so the
// lifecycle sources can tell this instance's notices from the rest of the
// group's and lifecycle calls name the right instance.
//
// Discover tries, in order: instance metadata (`instance-id` through the
// SDK's imds client, which fetches an IMDSv2 session token first, bounded by
// a short timeout so a host without IMDS does not stall the start), then
// cloud-init's cached copy (/var/lib/cloud/data/instance-id, present when
// IMDS was reachable at boot but is not now, e.g. hop limit 1 inside a
// container), then the Nitro DMI board asset tag
// (/sys/devices/virtual/dmi/id/board_asset_tag, set by the hypervisor on
// Nitro instances, readable without any network). A candidate is taken only
// when it looks like an instance id (^i-[0-9a-f]{8,17}$): a hostname, an
// empty file or a non-EC2 asset tag is skipped with its reason, and when
// nothing matches the error says every reason and how to set the id by hand.
//
// It only reads; the agent decides what a missing id means.
package instance
