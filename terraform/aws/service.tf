# The broker on ECS Fargate: desired_count tasks behind the load balancer,
# each running the API with the reconcile loop (BROKER_ENGINE=on); the shared
# Redis store makes their writes compare-and-set.
resource "aws_cloudwatch_log_group" "broker" {
  name              = "/${var.name}/broker"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.broker.arn
}

resource "aws_ecs_cluster" "broker" {
  name = var.name
  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

resource "aws_ecs_task_definition" "broker" {
  family                   = var.name
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.task_cpu
  memory                   = var.task_memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.task.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "X86_64"
  }

  container_definitions = jsonencode([{
    name         = "broker"
    image        = var.broker_image
    essential    = true
    # SkyPilot writes its state, keys and logs under ~/.sky and ~/.ssh.
    readonlyRootFilesystem = false
    command      = ["broker", "serve", "--host", "0.0.0.0", "--port", tostring(local.broker_port)]
    portMappings = [{ containerPort = local.broker_port, protocol = "tcp" }]
    environment  = [for key, value in local.environment : { name = key, value = value }]
    secrets      = [for key in local.secret_names : { name = key, valueFrom = aws_secretsmanager_secret.broker[key].arn }]
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.broker.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "broker"
      }
    }
  }])

  # Secrets must hold a value before a task can start.
  depends_on = [aws_secretsmanager_secret_version.broker]
}

resource "aws_ecs_service" "broker" {
  name                               = "broker"
  cluster                            = aws_ecs_cluster.broker.id
  task_definition                    = aws_ecs_task_definition.broker.arn
  desired_count                      = var.desired_count
  launch_type                        = "FARGATE"
  platform_version                   = "LATEST"
  deployment_minimum_healthy_percent = 50
  deployment_maximum_percent         = 200
  health_check_grace_period_seconds  = 60
  propagate_tags                     = "SERVICE"

  network_configuration {
    subnets          = var.private_subnet_ids
    security_groups  = [aws_security_group.service.id]
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.broker.arn
    container_name   = "broker"
    container_port   = local.broker_port
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  depends_on = [aws_lb_listener.https]
}
