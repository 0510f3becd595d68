# Traffic: internet -> 443 on the load balancer -> 8000 on the tasks -> 6379
# on Redis. Tasks also reach AWS APIs and Slack (443) and SSH into the
# training instances SkyPilot launches (22).
resource "aws_security_group" "lb" {
  name        = "${var.name}-lb"
  description = "HTTPS into the ${var.name} load balancer"
  vpc_id      = var.vpc_id
}

resource "aws_security_group" "service" {
  name        = "${var.name}-service"
  description = "${var.name} broker tasks"
  vpc_id      = var.vpc_id
}

resource "aws_security_group" "store" {
  name        = "${var.name}-store"
  description = "${var.name} Redis, reachable from the broker tasks only"
  vpc_id      = var.vpc_id
}

resource "aws_vpc_security_group_ingress_rule" "lb_https" {
  for_each          = toset(var.allowed_ingress_cidrs)
  security_group_id = aws_security_group.lb.id
  description       = "HTTPS from ${each.value}"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "lb_to_service" {
  security_group_id            = aws_security_group.lb.id
  description                  = "To the broker tasks"
  referenced_security_group_id = aws_security_group.service.id
  ip_protocol                  = "tcp"
  from_port                    = local.broker_port
  to_port                      = local.broker_port
}

resource "aws_vpc_security_group_ingress_rule" "service_from_lb" {
  security_group_id            = aws_security_group.service.id
  description                  = "From the load balancer"
  referenced_security_group_id = aws_security_group.lb.id
  ip_protocol                  = "tcp"
  from_port                    = local.broker_port
  to_port                      = local.broker_port
}

resource "aws_vpc_security_group_egress_rule" "service_to_store" {
  security_group_id            = aws_security_group.service.id
  description                  = "To Redis"
  referenced_security_group_id = aws_security_group.store.id
  ip_protocol                  = "tcp"
  from_port                    = 6379
  to_port                      = 6379
}

resource "aws_vpc_security_group_egress_rule" "service_https" {
  security_group_id = aws_security_group.service.id
  description       = "AWS APIs, ECR, Slack"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "service_ssh" {
  security_group_id = aws_security_group.service.id
  description       = "SkyPilot SSH to training instances"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
}

resource "aws_vpc_security_group_ingress_rule" "store_from_service" {
  security_group_id            = aws_security_group.store.id
  description                  = "From the broker tasks"
  referenced_security_group_id = aws_security_group.service.id
  ip_protocol                  = "tcp"
  from_port                    = 6379
  to_port                      = 6379
}
