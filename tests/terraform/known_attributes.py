"""Attributes (exported, plus the arguments we read back) of the types terraform/ refers to.

Taken from the provider documentation (``Attribute Reference`` sections of
hashicorp/aws 5.x, hashicorp/google 6.x, hashicorp/random 3.x). A reference
``T.N.attr`` whose attr is missing here fails the reference test, so a typo
such as ``aws_lb.broker.dns`` is caught offline. Add a type (or an attribute)
here when the modules start referring to it, after checking its docs.
"""

KNOWN_ATTRIBUTES: dict[str, set[str]] = {
    # hashicorp/aws
    "aws_caller_identity": {"account_id", "arn", "id", "user_id"},
    "aws_partition": {"dns_suffix", "id", "partition", "reverse_dns_prefix"},
    "aws_iam_policy_document": {"id", "json", "minified_json"},
    "aws_kms_key": {"arn", "id", "key_id", "policy", "description"},
    "aws_s3_bucket": {
        "arn", "bucket", "bucket_domain_name", "bucket_regional_domain_name", "hosted_zone_id", "id", "region",
    },
    "aws_elasticache_subnet_group": {"arn", "id", "name", "subnet_ids", "vpc_id"},
    "aws_elasticache_replication_group": {
        "arn", "cluster_enabled", "configuration_endpoint_address", "engine_version_actual", "id",
        "member_clusters", "port", "primary_endpoint_address", "reader_endpoint_address", "replication_group_id",
    },
    "aws_security_group": {"arn", "id", "name", "owner_id", "vpc_id"},
    "aws_secretsmanager_secret": {"arn", "id", "name"},
    "aws_secretsmanager_secret_version": {"arn", "id", "secret_id", "version_id"},
    "aws_iam_role": {"arn", "create_date", "id", "name", "unique_id"},
    "aws_iam_instance_profile": {"arn", "create_date", "id", "name", "role", "unique_id"},
    "aws_lb": {"arn", "arn_suffix", "dns_name", "id", "name", "zone_id"},
    "aws_lb_target_group": {"arn", "arn_suffix", "id", "name"},
    "aws_lb_listener": {"arn", "id", "port", "protocol"},
    "aws_cloudwatch_log_group": {"arn", "id", "name"},
    "aws_ecs_cluster": {"arn", "id", "name"},
    "aws_ecs_task_definition": {"arn", "arn_without_revision", "family", "id", "revision"},
    "aws_ecs_service": {"arn", "cluster", "desired_count", "id", "name"},
    # hashicorp/random
    "random_password": {"bcrypt_hash", "id", "result"},
    "random_id": {"b64_std", "b64_url", "byte_length", "dec", "hex", "id"},
    # hashicorp/google
    "google_project": {"id", "name", "number", "project_id"},
    "google_storage_bucket": {"id", "name", "self_link", "url", "location"},
    "google_redis_instance": {
        "auth_string", "current_location_id", "host", "id", "name", "persistence_iam_identity", "port",
        "read_endpoint", "read_endpoint_port", "region", "server_ca_certs",
    },
    "google_secret_manager_secret": {"create_time", "id", "name", "secret_id"},
    "google_secret_manager_secret_version": {"create_time", "id", "name", "version"},
    "google_service_account": {"account_id", "email", "id", "member", "name", "unique_id"},
    "google_project_iam_custom_role": {"id", "name", "role_id"},
    "google_cloud_run_v2_service": {"id", "location", "name", "uid", "uri", "urls"},
}
